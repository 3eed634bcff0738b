//! `sigil soak`: honest sensors, over coap:// and coaps://, publishing beside every
//! control-plane attack at once, for a bounded time; then the application verifies everything
//! and the server's own accounting says how much memory the attackers made it hold.
//!
//! The attacks (docs/security.md names them by number) run from their own loopback
//! addresses, so the server sees them as other hosts than the sensors (127.0.0.1):
//! 1. forged unsigned registrations of every device's endpoint with `ct=65100` (127.0.0.11);
//! 2. `POST /rd/N?lt=1` (and lt=60) and unsigned `DELETE /rd/N` on every entry (127.0.0.11);
//! 4. Confirmable GETs with fresh message IDs whose answers are large, to fill the
//!    deduplication cache (127.0.0.12);
//! 5. the same requests measured as a reflector: every answer's size against its request's,
//!    from a source that never proves it can receive (127.0.0.12);
//! 6. 256 source ports starting Block1 transfers and never finishing them (127.0.0.13);
//! 7. a flood of ClientHellos that return valid cookies, from 64 ports (127.0.0.14);
//! 8. a stream of refused requests, for the log (127.0.0.15).
//!
//! Attack 3 (a full disk) and 9 (bad CLI input) are not network attacks; they have their own
//! tests (crates/sigil-server/tests/disk_full.rs, crates/sigil-cli/tests/validation.rs).
//!
//! Beside them, the attacks of an attacker with many addresses (issue 25;
//! [`crate::attacks::many_hosts`]), each host an address 127.0.x.y:
//! - 256 hosts each holding a half-open handshake in DTLS records (127.0.1.*), and 256 more
//!   over the CoAP carrier (127.0.2.*);
//! - 400 hosts publishing a public reading again asking for a signed answer (127.0.3.* and
//!   127.0.4.*);
//! - 256 hosts sending forged P-256 readings under a registered `kid` with fresh numbers
//!   (127.0.5.*);
//! - three hosts filling the Block1 table with 16-byte first blocks (127.0.6.1-3);
//! - 300 hosts replaying a CryptoDiet node's recorded hello and messages at a `sigil diet`
//!   node (127.0.7.* and 127.0.8.*).
//!
//! While they run, honest newcomers start: a coap:// sensor that requires signed answers and
//! registers block-wise, coaps:// sensors over DTLS records and over the CoAP carrier, a
//! PSK-only node and a CryptoDiet neighbour; each must be served within
//! [`NEWCOMER_BOUND`]. The report gives each attack's cost to the attacker (datagrams and
//! bytes) and what the server spent, from its own counters.

use crate::sensor::{self, SensorReport, SensorRun};
use crate::storage::FileStorage;
use crate::util::{LOG_BYTES, LOG_COUNT_ONLY};
use anyhow::{Context, Result};
use sigil_client::os::OsRng;
use sigil_client::transport::Security;
use sigil_crypto::RustCrypto;
use sigil_device::{Device, DeviceConfig, Event, PublishOutcome};
use sigil_server::{DtlsConfig, Server, ServerConfig, Stats};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::UdpSocket;
use tokio::sync::watch;

mod attacks;
mod diet;
mod newcomers;
mod report;
use attacks::{
    block1_holders, control_plane, handshake_flood, load, public_reading, reflector, refusals,
    Victim,
};
use diet::{DietRig, ReplaysAccepted};
use newcomers::*;
pub use report::print_report;

#[derive(Clone, Debug)]
pub struct SoakOptions {
    pub duration: Duration,
    /// Honest coap:// sensors.
    pub sensors: usize,
    /// Honest coaps:// (DTLS-PSK) sensors.
    pub dtls_sensors: usize,
    pub interval: Duration,
    pub quiet: bool,
    /// Write the log to stderr as well as counting it.
    pub show_log: bool,
    /// The many-hosts attacks and the honest newcomers beside them.
    pub many_hosts: bool,
}

/// How long an honest newcomer that starts during the attacks may wait for its first
/// acknowledged reading (or, for a CryptoDiet neighbour, its first verified message).
pub const NEWCOMER_BOUND: Duration = Duration::from_secs(10);

/// What one attack sent and got back.
#[derive(Debug, Default, serde::Serialize)]
pub struct AttackLoad {
    pub name: &'static str,
    pub datagrams_sent: u64,
    pub bytes_sent: u64,
    pub answers: u64,
    pub bytes_received: u64,
    /// Largest answer over the request it answered (attack 5's measure).
    pub largest_ratio: f64,
    /// Answers by CoAP code (or "dtls" for handshake records).
    pub codes: BTreeMap<String, u64>,
}

#[derive(Debug, serde::Serialize)]
pub struct Budget {
    pub table: String,
    pub peak_bytes: u64,
    pub cap_bytes: u64,
}

#[derive(Debug, serde::Serialize)]
pub struct Check {
    pub what: String,
    pub ok: bool,
    pub observed: String,
    /// A failed check fails the soak. Not enforced only where the soak ended before what it
    /// judges could happen (printed "not judged: the soak was too short").
    pub enforced: bool,
}

impl Check {
    fn new(what: impl Into<String>, ok: bool, observed: impl Into<String>) -> Self {
        Self {
            what: what.into(),
            ok,
            observed: observed.into(),
            enforced: true,
        }
    }

    fn not_enforced(mut self) -> Self {
        self.enforced = false;
        self
    }
}

/// An honest device started while the many-hosts attacks ran.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Newcomer {
    pub what: String,
    /// Seconds from its start to its first acknowledged reading (verified message), if any.
    pub first_served_s: Option<f64>,
    pub acknowledged: usize,
}

/// A many-hosts attack's cost: to the attacker (what it sent) and to the server (its
/// counters of that kind, changed while the attacks ran).
#[derive(Debug, serde::Serialize)]
pub struct HostsAttack {
    #[serde(flatten)]
    pub load: crate::attacks::many_hosts::HostsLoad,
    pub server: BTreeMap<String, u64>,
    /// Why it did not run, when it did not.
    pub not_run: Option<String>,
}

#[derive(Debug, serde::Serialize)]
pub struct SoakReport {
    pub seconds: f64,
    pub sensors: usize,
    pub dtls_sensors: usize,
    pub readings_acknowledged: usize,
    pub readings_stored: u64,
    pub readings_verified: usize,
    pub readings_failed_verification: usize,
    pub acknowledged_but_missing: usize,
    /// Readings a sensor finally gave up on (refused for good or timed out).
    pub readings_given_up: usize,
    /// Acknowledged readings per sensor, fewest first.
    pub fewest_acknowledged: usize,
    pub attacks: Vec<AttackLoad>,
    pub memory: Vec<Budget>,
    pub log_bytes: u64,
    pub peak_rss_kib: u64,
    pub checks: Vec<Check>,
    pub server_counters: BTreeMap<String, u64>,
    pub many_hosts: Vec<HostsAttack>,
    pub newcomers: Vec<Newcomer>,
}

impl SoakReport {
    pub fn ok(&self) -> bool {
        self.checks.iter().all(|c| c.ok || !c.enforced)
    }
}

/// Log budget the soak holds the process to: the server's limiter allows 21 lines per kind
/// per 10 s window (crates/sigil-server/src/log.rs); 64 KB per window leaves room for the
/// sensors' own warnings.
const LOG_BYTES_PER_10S: u64 = 64 * 1024;

/// The application's reconciliation (as `demo::reconcile`) over the signing sensors only:
/// readings stored and verified for the identities in `wanted`.
async fn reconcile_signed(
    addr: SocketAddr,
    trust: &std::collections::HashSet<sigil_identity::Identity>,
    db: &std::path::Path,
    reports: &[SensorReport],
    wanted: &std::collections::HashSet<String>,
) -> Result<crate::demo::Reconciled> {
    use std::collections::HashSet;
    let transport =
        sigil_client::transport::Transport::open(addr, Security::None, Default::default()).await?;
    let app = sigil_client::app::run(transport, Some(trust), &Default::default(), None).await?;
    let mine = || app.sensors.iter().filter(|s| wanted.contains(&s.ep));
    let verified: HashSet<(String, u64)> = mine()
        .flat_map(|s| {
            s.readings
                .iter()
                .filter(|r| r.verified)
                .map(move |r| (s.ep.clone(), r.seq))
        })
        .collect();
    let stored: HashSet<(String, u64)> = sigil_server::Store::open(db)?
        .reading_keys()?
        .into_iter()
        .filter(|(ep, _)| wanted.contains(ep))
        .collect();
    let mut missing = 0;
    for r in reports {
        for seq in &r.acknowledged {
            let k = (r.identity.clone(), *seq);
            if !stored.contains(&k) || !verified.contains(&k) {
                missing += 1;
                tracing::error!(ep = %r.identity, seq, "acknowledged reading missing or not verified");
            }
        }
    }
    Ok(crate::demo::Reconciled {
        stored: stored.len(),
        verified: mine().map(|s| s.verified).sum(),
        failed: mine().map(|s| s.failed).sum(),
        missing,
    })
}

/// Server counters whose names start with one of `prefixes`, as changed between `before`
/// and `after`.
fn counter_changes(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
    prefixes: &[&str],
) -> BTreeMap<String, u64> {
    after
        .iter()
        .filter(|(k, _)| prefixes.iter().any(|p| k.starts_with(p)))
        .filter_map(|(k, v)| {
            let d = v.saturating_sub(before.get(k).copied().unwrap_or(0));
            (d > 0).then(|| (k.clone(), d))
        })
        .collect()
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

pub async fn run(opts: SoakOptions) -> Result<SoakReport> {
    // SIGINT or SIGTERM ends the attacks early; the sensors settle and the report follows.
    let (interrupt_tx, interrupted) = watch::channel(false);
    crate::util::StopSignals::new()
        .context("cannot handle SIGINT and SIGTERM")?
        .forward_to(interrupt_tx);
    LOG_COUNT_ONLY.store(!opts.show_log, Ordering::Relaxed);
    let log_start = LOG_BYTES.load(Ordering::Relaxed);
    let tmp = tempfile::Builder::new().prefix("sigil-soak-").tempdir()?;
    let dir = tmp.path().to_path_buf();
    let db = dir.join("sigil.db");
    let say = |s: &str| {
        if !opts.quiet {
            eprintln!("{s}");
        }
    };

    // The server, plain and DTLS, on loopback.
    let stats = Stats::default();
    let mut config = ServerConfig::new("127.0.0.1:0".parse()?, db.clone());
    config.service.freshness.max_ahead = 1000;
    config.dtls = Some(DtlsConfig::new("127.0.0.1:0".parse()?));
    let server = Server::start(config, stats.clone()).await?;
    let addr = server.local_addr;
    let dtls_addr = server.dtls.as_ref().context("no coaps:// endpoint")?.addr;
    say(&format!("server on coap://{addr} and coaps://{dtls_addr}"));

    // Sensors generate their keys; the installer provisions them (PSKs for the DTLS ones).
    let total = opts.sensors + opts.dtls_sensors;
    let mut devices = Vec::new();
    let mut labels = String::from("# soak sensors\n");
    let store = sigil_server::Store::open(&db)?;
    let mut victims = Vec::new();
    for i in 0..total {
        let mut storage = FileStorage::open(&dir.join(format!("sensor-{i:03}")))?;
        let config = DeviceConfig {
            lifetime: Duration::from_secs(120),
            // Every third sensor registers block-wise (32-byte Block1 blocks), as a kit with
            // several keys does, so attack 6 meets the transfers it would block.
            block_szx: if i % 3 == 1 { 1 } else { 4 },
            // The first signs with P-256: the forged readings of the verification flood
            // claim its kid.
            algorithm: if i == 0 && opts.many_hosts {
                sigil_crypto::SignatureAlgorithm::EcdsaP256
            } else {
                sigil_crypto::SignatureAlgorithm::Ed25519
            },
            ..Default::default()
        };
        let d = Device::boot(RustCrypto, config, &mut storage, &mut OsRng, &[], &[])
            .map_err(|e| anyhow::anyhow!("sensor {i}: {e}"))?;
        labels.push_str(&format!(
            "{} device soak sensor {i}\n",
            d.identity().label()
        ));
        victims.push(Victim {
            ep: d.identity().to_string(),
            key: *d.public_key(),
        });
        devices.push((d, storage));
    }
    // The honest newcomers of the many-hosts attacks, provisioned now, started later.
    let mut newcomers = Vec::new();
    if opts.many_hosts {
        newcomers = boot_newcomers(&dir, &store, &mut labels)?;
    }
    let now = sigil_client::os::unix_now().as_secs();
    sigil_server::provision::import(&store, &labels, now, false)?;
    for n in &newcomers {
        if let Security::Psk { identity, key, .. } = &n.security {
            if n.psk_only.is_none() {
                let id = sigil_identity::Identity::parse(&String::from_utf8_lossy(identity))
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                store.set_psk(&id, key, now)?;
            }
        }
    }
    let mut security = Vec::new();
    for (i, (d, _)) in devices.iter().enumerate() {
        if i < opts.sensors {
            security.push(Security::None);
        } else {
            let mut key = vec![0u8; 16];
            getrandom::fill(&mut key).map_err(|e| anyhow::anyhow!("randomness: {e}"))?;
            store.set_psk(d.identity(), &key, now)?;
            security.push(Security::Psk {
                identity: d.identity().to_string().into_bytes(),
                key,
                ecdhe: false,
            });
        }
    }
    drop(store);
    let trust = sigil_client::app::load_trust(&labels)?;

    // Honest sensors first, so there is something to attack.
    let acked = Arc::new(AtomicU64::new(0));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = Vec::new();
    for (i, ((device, storage), sec)) in devices.into_iter().zip(security).enumerate() {
        let secure = !matches!(sec, Security::None);
        let run = SensorRun {
            server: if secure { dtls_addr } else { addr },
            interval: opts.interval,
            readings: None,
            phase: i as f64 * 0.7,
            security: sec,
            dtls: Default::default(),
            association: None,
            // Every other coaps:// sensor has its handshakes carried as a CoAP resource.
            carrier: if secure && i % 2 == 1 {
                sigil_client::Carrier::Coap
            } else {
                sigil_client::Carrier::Records
            },
            tap: None,
        };
        let a = acked.clone();
        let stop = stop_rx.clone();
        tasks.push(tokio::spawn(async move {
            sensor::run(device, storage, run, stop, move |ev| {
                if let Event::Published {
                    outcome: PublishOutcome::Acknowledged,
                    ..
                } = ev
                {
                    a.fetch_add(1, Ordering::Relaxed);
                }
            })
            .await
        }));
    }
    // The CryptoDiet nodes, so that C's hello and messages are recorded before the replay.
    let mut diet = None;
    let mut diet_not_run = None;
    if opts.many_hosts {
        match DietRig::start(&dir).await {
            Ok(r) => diet = Some(r),
            Err(e) => diet_not_run = Some(format!("sigil diet could not run here: {e:#}")),
        }
    }
    let warmup = Instant::now();
    while acked.load(Ordering::Relaxed) < total as u64
        && warmup.elapsed() < Duration::from_secs(30)
        && !*interrupted.borrow()
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Every attack at once, until the end.
    let (astop_tx, astop_rx) = watch::channel(false);
    let loads = [
        load("1+2 forged registrations, lifetimes, removals"),
        load("4+5 large answers with fresh message IDs"),
        load("6 Block1 transfers held open from 256 ports"),
        load("7 ClientHellos with valid cookies from 64 ports, half over CoAP"),
        load("8 refused requests"),
    ];
    let attackers = vec![
        tokio::spawn(control_plane(
            addr,
            victims.clone(),
            total + 4,
            loads[0].clone(),
            astop_rx.clone(),
        )),
        tokio::spawn(reflector(addr, loads[1].clone(), astop_rx.clone())),
        tokio::spawn(block1_holders(addr, loads[2].clone(), astop_rx.clone())),
        tokio::spawn(handshake_flood(
            dtls_addr,
            loads[3].clone(),
            astop_rx.clone(),
        )),
        tokio::spawn(refusals(addr, loads[4].clone(), astop_rx.clone())),
    ];
    // The many-hosts attacks, beside them.
    let before = stats.snapshot();
    let mut hosts_loads: Vec<(crate::attacks::many_hosts::Load, &[&str], Option<String>)> =
        Vec::new();
    let mut hosts_attackers = Vec::new();
    if opts.many_hosts {
        use crate::attacks::many_hosts as mh;
        let handshake_counters: &[&str] = &[
            "dtls.handshake",
            "dtls.hello_verify",
            "dtls.refused",
            "dtls_coap.",
        ];
        for (block, coap, name) in [
            (
                1u8,
                false,
                "256 hosts each holding a half-open handshake (DTLS records)",
            ),
            (
                2u8,
                true,
                "256 hosts each holding a half-open handshake (CoAP carrier)",
            ),
        ] {
            let l = mh::load(name, 256);
            hosts_attackers.push(tokio::spawn(mh::half_open_holders(
                dtls_addr,
                block,
                256,
                coap,
                Duration::from_secs(10),
                l.clone(),
                astop_rx.clone(),
            )));
            hosts_loads.push((l, handshake_counters, None));
        }
        // A public latest reading of the P-256 sensor: replayed asking for signed answers,
        // and the victim of the forged readings.
        let victim = public_reading(addr, &victims[0].ep).await;
        let l = mh::load(
            "400 hosts replaying a public reading asking for a signed answer (option 65000)",
            400,
        );
        let l2 = mh::load(
            "256 hosts sending forged P-256 readings (registered kid, fresh numbers)",
            256,
        );
        match &victim {
            Ok((href, reading, seq, kid)) => {
                hosts_attackers.push(tokio::spawn(mh::resync_replayers(
                    addr,
                    3,
                    400,
                    href.clone(),
                    reading.clone(),
                    Duration::from_secs(1),
                    l.clone(),
                    astop_rx.clone(),
                )));
                hosts_loads.push((l, &["answer."], None));
                let forged = mh::forged_readings(kid, seq + 200, 64)?;
                hosts_attackers.push(tokio::spawn(mh::verification_flood(
                    addr,
                    5,
                    256,
                    href.clone(),
                    forged,
                    Duration::from_millis(500),
                    l2.clone(),
                    astop_rx.clone(),
                )));
                hosts_loads.push((l2, &["verify.", "publish."], None));
            }
            Err(e) => {
                hosts_loads.push((l, &[], Some(format!("no public reading to replay: {e:#}"))));
                hosts_loads.push((l2, &[], Some(format!("no public reading to forge: {e:#}"))));
            }
        }
        let l = mh::load(
            "3 hosts filling the Block1 table with 16-byte first blocks",
            3,
        );
        hosts_attackers.push(tokio::spawn(mh::block1_fill(
            addr,
            6,
            100,
            4,
            Duration::from_secs(5),
            l.clone(),
            astop_rx.clone(),
        )));
        hosts_loads.push((l, &["coap.block1", "mem.block1"], None));
        let l = mh::load(
            "300 hosts replaying a CryptoDiet node's recorded hello and messages",
            300,
        );
        match &diet {
            Some(rig) => {
                hosts_attackers.push(tokio::spawn(mh::diet_replayers(
                    rig.a_addr,
                    7,
                    300,
                    rig.recorded.clone(),
                    Some(rig.c_seen_at),
                    Duration::from_secs(3),
                    l.clone(),
                    astop_rx.clone(),
                )));
                hosts_loads.push((l, &[], None));
            }
            None => hosts_loads.push((l, &[], diet_not_run.clone())),
        }
    }
    let mut newcomer_plans = Some(newcomers);
    let mut started_newcomers = Vec::new();
    // Newcomers start once the attacks have had time to fill what they fill.
    let newcomers_at = (opts.duration / 4).min(Duration::from_secs(20));
    let bar = crate::demo::progress_bar(opts.quiet, opts.duration);
    let start = Instant::now();
    let mut next_progress = start + Duration::from_secs(60);
    while start.elapsed() < opts.duration && !*interrupted.borrow() {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if start.elapsed() >= newcomers_at {
            if let Some(plans) = newcomer_plans.take() {
                for n in plans {
                    started_newcomers.push(start_newcomer(
                        n,
                        addr,
                        dtls_addr,
                        opts.interval,
                        stop_rx.clone(),
                    ));
                }
                if let Some(rig) = diet.as_mut() {
                    if let Err(e) = rig.start_newcomer() {
                        tracing::warn!("the CryptoDiet newcomer did not start: {e:#}");
                    }
                }
            }
        }
        bar.set_position(start.elapsed().as_secs());
        let sent: u64 = loads
            .iter()
            .filter_map(|l| l.lock().ok().map(|l| l.datagrams_sent))
            .sum();
        bar.set_message(format!(
            "{} readings acknowledged; {} attack datagrams",
            acked.load(Ordering::Relaxed),
            sent
        ));
        // Progress for logs that are not a terminal: a line a minute.
        if opts.quiet && Instant::now() >= next_progress {
            next_progress += Duration::from_secs(60);
            eprintln!(
                "soak: {:>4}s, {} readings acknowledged, {} attack datagrams",
                start.elapsed().as_secs(),
                acked.load(Ordering::Relaxed),
                sent
            );
        }
    }
    let _ = astop_tx.send(true);
    for a in attackers {
        a.await.context("attack task")??;
    }
    let mut hosts_errors = Vec::new();
    for a in hosts_attackers {
        if let Err(e) = a.await.context("many-hosts attack task")? {
            hosts_errors.push(format!("{e:#}"));
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    // The sensors settle what is in flight (re-registering where the attacks got through).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let _ = stop_tx.send(true);
    bar.finish_and_clear();
    let mut reports: Vec<SensorReport> = Vec::new();
    for t in tasks {
        reports.push(t.await.context("sensor task")??);
    }
    let mut newcomer_reports: Vec<SensorReport> = Vec::new();
    let mut newcomers_out = Vec::new();
    for (served, task, psk_only, what) in started_newcomers {
        let r = task.await.context("newcomer task")??;
        let s = served.lock().map(|s| (s.first, s.acknowledged));
        let (first, acknowledged) = s.unwrap_or((None, 0));
        newcomers_out.push(Newcomer {
            what,
            first_served_s: first.map(|d| d.as_secs_f64()),
            acknowledged,
        });
        if psk_only.is_none() {
            newcomer_reports.push(r);
        }
    }
    let mut diet_outcome = None;
    let mut diet_refusals = BTreeMap::new();
    if let Some(rig) = diet.take() {
        let (first, n) = rig.newcomer_served();
        // Due once the other newcomers were: one that did not start is never served.
        if rig.d_started.is_some() || newcomer_plans.is_none() {
            newcomers_out.push(Newcomer {
                what: "CryptoDiet neighbour (a message verified by the node)".into(),
                first_served_s: first.map(|d| d.as_secs_f64()),
                acknowledged: n,
            });
        }
        diet_outcome = Some((
            rig.c_messages(),
            rig.c_served(),
            rig.started.elapsed(),
            rig.replays_accepted(),
        ));
        let events = rig.events.clone();
        let summary = rig.stop().await;
        diet_refusals = DietRig::refusals_of(&events, summary.as_ref());
    }

    // The application verifies everything end to end (the signing sensors'; a PSK-only
    // newcomer's MACed readings are for readers with its key).
    let wanted: std::collections::HashSet<String> = reports
        .iter()
        .chain(&newcomer_reports)
        .map(|r| r.identity.clone())
        .collect();
    let all_reports: Vec<SensorReport> = reports.iter().chain(&newcomer_reports).cloned().collect();
    let found = reconcile_signed(addr, &trust, &db, &all_reports, &wanted).await?;
    let counters = stats.snapshot();
    server.shutdown().await;

    let mut memory = Vec::new();
    for (k, cap) in &counters {
        if let Some(table) = k.strip_prefix("mem.").and_then(|t| t.strip_suffix(".cap")) {
            memory.push(Budget {
                table: table.to_string(),
                peak_bytes: counters
                    .get(&format!("mem.{table}.peak"))
                    .copied()
                    .unwrap_or(0),
                cap_bytes: *cap,
            });
        }
    }
    let attacks: Vec<AttackLoad> = loads
        .iter()
        .map(|l| std::mem::take(&mut *l.lock().unwrap_or_else(|p| p.into_inner())))
        .collect();
    let log_bytes = LOG_BYTES.load(Ordering::Relaxed) - log_start;
    LOG_COUNT_ONLY.store(false, Ordering::Relaxed);
    let acknowledged: usize = reports.iter().map(|r| r.acknowledged.len()).sum();
    let given_up: usize = reports
        .iter()
        .map(|r| r.rejected.len() + r.timed_out.len())
        .sum();
    let fewest = reports
        .iter()
        .map(|r| r.acknowledged.len())
        .min()
        .unwrap_or(0);
    // Against the time the attacks actually ran (a stop signal may have cut it short).
    let expected_each = (seconds / opts.interval.as_secs_f64() / 2.0) as usize;
    let reflect = attacks
        .iter()
        .filter(|a| {
            a.name.starts_with("4+5") || a.name.starts_with("1+2") || a.name.starts_with("8")
        })
        .map(|a| a.largest_ratio)
        .fold(0.0, f64::max);
    let log_budget = LOG_BYTES_PER_10S * (seconds / 10.0).ceil() as u64;
    let mut checks = vec![
        Check {
            what: "every acknowledged reading is stored and verified by the application".into(),
            ok: found.missing == 0 && acknowledged > 0,
            observed: format!("{acknowledged} acknowledged, {} missing", found.missing),
            enforced: true,
        },
        Check {
            what: "stored = verified, none failed verification".into(),
            ok: found.stored == found.verified && found.failed == 0,
            observed: format!(
                "{} stored, {} verified, {} failed",
                found.stored, found.verified, found.failed
            ),
            enforced: true,
        },
        Check {
            what: "no reading given up (refusals lead to re-registration and republication)".into(),
            ok: given_up == 0,
            observed: format!("{given_up} given up"),
            enforced: true,
        },
        Check {
            what: format!(
                "every sensor kept publishing (at least {expected_each} acknowledged each)"
            ),
            ok: fewest >= expected_each,
            observed: format!("fewest acknowledged by one sensor: {fewest}"),
            enforced: true,
        },
        Check {
            what: "coap:// answers to unverified sources are at most 3x their requests".into(),
            ok: reflect <= 3.0,
            observed: format!("largest answer/request ratio {reflect:.2}"),
            enforced: true,
        },
        Check {
            what: format!("log within {} KB per 10 s", LOG_BYTES_PER_10S / 1024),
            ok: log_bytes <= log_budget,
            observed: format!("{log_bytes} bytes in {seconds:.0} s"),
            enforced: true,
        },
    ];
    checks.push(Check {
        what: "the server's tables stay within their byte budgets".into(),
        ok: !memory.is_empty() && memory.iter().all(|m| m.peak_bytes <= m.cap_bytes),
        observed: memory
            .iter()
            .map(|m| format!("{} {}/{}", m.table, m.peak_bytes, m.cap_bytes))
            .collect::<Vec<_>>()
            .join(", "),
        enforced: true,
    });
    // The many-hosts attacks: what each cost, and whether the newcomers were served.
    let many_hosts: Vec<HostsAttack> = hosts_loads
        .iter()
        .map(|(l, prefixes, not_run)| {
            let load = l.lock().map(|l| l.clone()).unwrap_or_default();
            // The CryptoDiet replay costs the node, not the server: what it refused.
            let server = if load.name.contains("CryptoDiet") {
                diet_refusals.clone()
            } else {
                counter_changes(&before, &counters, prefixes)
            };
            HostsAttack {
                load,
                server,
                not_run: not_run.clone(),
            }
        })
        .collect();
    if opts.many_hosts {
        if !hosts_errors.is_empty() {
            checks.push(Check::new(
                "the many-hosts attacks ran",
                false,
                hosts_errors.join("; "),
            ));
        }
        // Every many-hosts attack that could not run fails the soak.
        for a in &many_hosts {
            if let Some(why) = &a.not_run {
                checks.push(Check::new(
                    format!("the many-hosts attack ran: {}", a.load.name),
                    false,
                    why.clone(),
                ));
            }
        }
        // A newcomer is judged unless the soak ended before it could have been served in the
        // bound (it started less than the bound before the end).
        let newcomers_ran = seconds - newcomers_at.as_secs_f64();
        let judged = newcomers_ran >= NEWCOMER_BOUND.as_secs_f64();
        for n in &newcomers_out {
            let ok = n
                .first_served_s
                .is_some_and(|t| t <= NEWCOMER_BOUND.as_secs_f64());
            let c = Check::new(
                format!(
                    "newcomer during the many-hosts attacks served within {} s: {}",
                    NEWCOMER_BOUND.as_secs(),
                    n.what
                ),
                ok,
                match n.first_served_s {
                    Some(t) => {
                        format!("first served after {t:.2} s, {} in all", n.acknowledged)
                    }
                    None => format!("never served in {newcomers_ran:.0} s"),
                },
            );
            checks.push(if judged || ok { c } else { c.not_enforced() });
        }
        if newcomers_out.is_empty() {
            let c = Check::new(
                "newcomers during the many-hosts attacks served",
                false,
                if newcomer_plans.is_some() {
                    "not started (the soak ended before they were due)".to_string()
                } else {
                    "none started".to_string()
                },
            );
            checks.push(if judged { c } else { c.not_enforced() });
        }
        if let Some((c_messages, c_served, nodes_ran, replays)) = diet_outcome {
            let ok = c_served.is_some_and(|t| t <= NEWCOMER_BOUND);
            let c = Check::new(
                format!(
                    "CryptoDiet: A established C and verified a message of C within {} s",
                    NEWCOMER_BOUND.as_secs()
                ),
                ok,
                match c_served {
                    Some(t) => format!(
                        "after {:.2} s; {c_messages} messages of C verified through its own address",
                        t.as_secs_f64()
                    ),
                    None => format!("not in {:.0} s", nodes_ran.as_secs_f64()),
                },
            );
            // Not judged only when the nodes ran less than the bound.
            checks.push(if ok || nodes_ran >= NEWCOMER_BOUND {
                c
            } else {
                c.not_enforced()
            });
            let d = many_hosts
                .iter()
                .find(|a| a.load.name.contains("CryptoDiet"));
            let (sent, spoofed) =
                d.map_or((0, 0), |d| (d.load.datagrams_sent, d.load.spoofed_sent));
            let ReplaysAccepted {
                messages,
                slots,
                moves,
                twice,
            } = replays;
            checks.push(Check::new(
                "CryptoDiet: nothing a trusted node sent is accepted again, from other addresses or its own",
                sent > 0 && messages == 0 && slots == 0 && moves == 0 && twice == 0,
                format!(
                    "{sent} datagrams replayed ({spoofed} from C's own address); accepted as C: {messages} messages and {slots} slots at other addresses, {moves} moves away from C, {twice} messages taken twice"
                ),
            ));
            if let Some(d) = d {
                let over: Vec<String> = d
                    .load
                    .per_host
                    .iter()
                    .filter(|(_, [out, back])| back > out)
                    .map(|(ip, [out, back])| format!("{ip} {back}/{out}"))
                    .collect();
                let most = d
                    .load
                    .per_host
                    .values()
                    .filter(|[out, _]| *out > 0)
                    .map(|[out, back]| *back as f64 / *out as f64)
                    .fold(0.0, f64::max);
                checks.push(Check::new(
                    "CryptoDiet: the node sends each replaying address no more than it sent",
                    !d.load.per_host.is_empty() && over.is_empty(),
                    format!(
                        "{} datagrams, {} bytes to {} replaying addresses for {} bytes sent; largest back/sent at one address {most:.2}{}",
                        d.load.answers,
                        d.load.bytes_received,
                        d.load.per_host.len(),
                        d.load.bytes_sent,
                        if over.is_empty() {
                            String::new()
                        } else {
                            format!("; more back than sent: {}", over.join(", "))
                        }
                    ),
                ));
            }
        }
    }
    Ok(SoakReport {
        seconds,
        sensors: opts.sensors,
        dtls_sensors: opts.dtls_sensors,
        readings_acknowledged: acknowledged,
        readings_stored: found.stored as u64,
        readings_verified: found.verified,
        readings_failed_verification: found.failed,
        acknowledged_but_missing: found.missing,
        readings_given_up: given_up,
        fewest_acknowledged: fewest,
        attacks,
        memory,
        log_bytes,
        peak_rss_kib: peak_rss_kib(),
        checks,
        server_counters: counters,
        many_hosts,
        newcomers: newcomers_out,
    })
}
