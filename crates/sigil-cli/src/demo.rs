//! `sigil demo`: the whole of RFC 8387 §7 on loopback. A server with a fresh database, N
//! emulated sensors that generate their own keys, an installer feeding their identities to the
//! server, the attacks the RFC discusses, and the application verifying every reading.

use crate::attacks;
use crate::sensor::{self, SensorReport, SensorRun};
use crate::storage::FileStorage;
use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use sigil_client::os::OsRng;
use sigil_crypto::{PublicKey, RustCrypto, SignatureAlgorithm};
use sigil_device::{Device, DeviceConfig, Event, PublishOutcome};
use sigil_identity::Identity;
use sigil_objects::ReadingFormat;
use sigil_server::{Server, ServerConfig, Stats};
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct DemoOptions {
    pub sensors: usize,
    pub duration: Duration,
    pub interval: Duration,
    pub dir: Option<PathBuf>,
    /// Size of the kit provisioned by its group identity (0: none).
    pub kit: usize,
    pub quiet: bool,
}

#[derive(Debug, serde::Serialize)]
pub struct DemoSummary {
    pub sensors: usize,
    pub readings_acknowledged: usize,
    pub readings_sent_non_confirmable: u64,
    pub readings_stored: u64,
    pub readings_verified_by_application: usize,
    pub readings_failed_verification: usize,
    pub acknowledged_but_missing: usize,
    /// Readings pushed to the follower (`sigil app --follow`'s library) as they were
    /// published, each verified end to end on arrival.
    pub readings_pushed_to_follower: u64,
    /// Pushed readings that failed the follower's verification.
    pub follower_failed: u64,
    pub attacks: Vec<attacks::AttackResult>,
    pub server_counters: BTreeMap<String, u64>,
    pub database: String,
    /// The access-control part, over coaps:// ([`crate::demo_access`]).
    pub access: crate::demo_access::AccessSummary,
}

/// The public keys of a kit except member `i`: what member `i` hashes after its own key.
pub fn kit_members_except(keys: &[PublicKey], i: usize) -> Vec<PublicKey> {
    keys.iter()
        .enumerate()
        .filter(|(j, _)| *j != i)
        .map(|(_, k)| *k)
        .collect()
}

/// Which algorithm and format sensor `i` uses: a mix, so every wire form is exercised.
fn flavour(i: usize) -> (SignatureAlgorithm, ReadingFormat) {
    match i % 5 {
        3 => (SignatureAlgorithm::EcdsaP256, ReadingFormat::Cose),
        4 => (SignatureAlgorithm::Ed25519, ReadingFormat::Jws),
        _ => (SignatureAlgorithm::Ed25519, ReadingFormat::Cose),
    }
}

pub async fn run(opts: DemoOptions) -> Result<DemoSummary> {
    let tmp;
    let dir = match &opts.dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            d.clone()
        }
        None => {
            tmp = tempfile::Builder::new().prefix("sigil-demo-").tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    let db = dir.join("sigil.db");
    if db.exists() {
        bail!(
            "{} already exists: the demo starts from a fresh database",
            db.display()
        );
    }
    let say = |s: &str| {
        if !opts.quiet {
            eprintln!("{s}");
        }
    };

    // 1. The server, on loopback with a fresh embedded database.
    let stats = Stats::default();
    let mut config = ServerConfig::new("127.0.0.1:0".parse()?, db.clone());
    config.service.freshness.max_ahead = 1000;
    let server = Server::start(config, stats.clone()).await?;
    let addr = server.local_addr;
    say(&format!(
        "server listening on coap://{addr}, database {}",
        db.display()
    ));

    // 2. First boot: every sensor generates its key pair and identity in its own storage. The
    //    members of the kit then learn each other's public keys and boot again with them, so
    //    their identities are the kit-bound Idev of RFC 8387 §4.1.
    let kit = opts.kit.min(opts.sensors);
    let mut storages = Vec::new();
    let mut devices = Vec::new();
    for i in 0..opts.sensors {
        let (algorithm, format) = if i < kit {
            (SignatureAlgorithm::Ed25519, ReadingFormat::Cose)
        } else {
            flavour(i)
        };
        let mut storage = FileStorage::open(&dir.join(format!("sensor-{i:03}")))?;
        let config = DeviceConfig {
            algorithm,
            format,
            lifetime: Duration::from_secs(300),
            ..Default::default()
        };
        let d = Device::boot(RustCrypto, config, &mut storage, &mut OsRng, &[], &[])
            .map_err(|e| anyhow::anyhow!("sensor {i}: {e}"))?;
        devices.push((config, d));
        storages.push(storage);
    }
    let kit_keys: Vec<PublicKey> = devices[..kit]
        .iter()
        .map(|(_, d)| *d.public_key())
        .collect();
    for i in 0..kit {
        let others = kit_members_except(&kit_keys, i);
        let config = devices[i].0;
        let d = Device::boot(
            RustCrypto,
            config,
            &mut storages[i],
            &mut OsRng,
            &others,
            &[],
        )
        .map_err(|e| anyhow::anyhow!("sensor {i}: {e}"))?;
        devices[i].1 = d;
    }
    let devices: Vec<Device<RustCrypto>> = devices.into_iter().map(|(_, d)| d).collect();

    // 3. The installer scans the labels (and the kit's box) and feeds them to the server.
    let mut labels = String::from("# identities scanned at installation\n");
    if kit > 0 {
        let gid = Identity::of_group(&RustCrypto, &kit_keys).map_err(|e| anyhow::anyhow!("{e}"))?;
        labels.push_str(&format!("{} group kit of {kit} sensors\n", gid.label()));
    }
    for (i, d) in devices.iter().enumerate().skip(kit) {
        labels.push_str(&format!("{} device sensor {i}\n", d.identity().label()));
    }
    let labels_path = dir.join("box-labels.txt");
    std::fs::write(&labels_path, &labels)?;
    {
        let store = sigil_server::Store::open(&db)?;
        let added = sigil_server::provision::import(
            &store,
            &labels,
            sigil_client::os::unix_now().as_secs(),
            false,
        )?
        .added;
        say(&format!("installer provisioned {added} identities from {} ({} sensors, {} in a kit by its group identity)", labels_path.display(), opts.sensors, kit));
    }
    let trust = sigil_client::app::load_trust(&labels)?;

    // 4. Run the sensors, with a progress bar; mount the attacks partway through.
    let acked = Arc::new(AtomicU64::new(0));
    let rejected = Arc::new(AtomicU64::new(0));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::new();
    for (i, (device, storage)) in devices.into_iter().zip(storages).enumerate() {
        let run = SensorRun {
            server: addr,
            interval: opts.interval,
            readings: None,
            phase: i as f64 * 0.7,
            security: sigil_client::transport::Security::None,
            dtls: Default::default(),
            association: None,
            carrier: Default::default(),
            tap: None,
        };
        let (a, r) = (acked.clone(), rejected.clone());
        let stop = stop_rx.clone();
        tasks.push(tokio::spawn(async move {
            sensor::run(device, storage, run, stop, move |ev| {
                if let Event::Published { outcome, .. } = ev {
                    match outcome {
                        PublishOutcome::Acknowledged => {
                            a.fetch_add(1, Ordering::Relaxed);
                        }
                        PublishOutcome::Rejected(_) | PublishOutcome::TimedOut => {
                            r.fetch_add(1, Ordering::Relaxed);
                        }
                        _ => {}
                    }
                }
            })
            .await
        }));
    }
    let bar = progress_bar(opts.quiet, opts.duration);
    // A follower observes every topic (CoAP Observe) and verifies each reading as it is
    // pushed; the first few are shown as they arrive.
    let (pushed, follow_failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let follower = {
        let (pushed, failed, trust, bar) = (
            pushed.clone(),
            follow_failed.clone(),
            trust.clone(),
            bar.clone(),
        );
        let duration = opts.duration;
        let quiet = opts.quiet;
        tokio::spawn(async move {
            // The sensors register within their first interval.
            tokio::time::sleep(Duration::from_millis(800)).await;
            let t = sigil_client::transport::Transport::open(
                addr,
                sigil_client::transport::Security::None,
                Default::default(),
            )
            .await?;
            let options = sigil_client::follow::FollowOptions {
                duration: Some(duration.saturating_sub(Duration::from_millis(800))),
                relookup: Duration::from_secs(2),
                ..Default::default()
            };
            let mut shown = 0;
            sigil_client::follow::follow(t, Some(&trust), &HashSet::new(), &options, |e| {
                if let sigil_client::follow::Followed::Reading { sensor, reading } = e {
                    pushed.fetch_add(1, Ordering::Relaxed);
                    if reading.error.is_some() {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                    if !quiet && shown < 5 {
                        shown += 1;
                        let line = format!(
                            "follower: sensor {} seq {} pushed as published, verified end to end: {}",
                            sensor.label,
                            reading.seq,
                            reading.error.as_deref().unwrap_or("ok")
                        );
                        bar.suspend(|| eprintln!("{line}"));
                    }
                }
            })
            .await
        })
    };
    let start = Instant::now();
    let attack_at = opts.duration / 2;
    let mut attack_results = None;
    while start.elapsed() < opts.duration {
        tokio::time::sleep(Duration::from_millis(200)).await;
        bar.set_position(start.elapsed().as_secs());
        bar.set_message(format!(
            "{} readings acknowledged, {} refused, {} pushed to the follower",
            acked.load(Ordering::Relaxed),
            rejected.load(Ordering::Relaxed),
            pushed.load(Ordering::Relaxed)
        ));
        if attack_results.is_none()
            && start.elapsed() >= attack_at
            && acked.load(Ordering::Relaxed) > 0
        {
            bar.set_message("mounting attacks");
            attack_results = Some(attacks::run_all(addr, &stats).await?);
        }
    }
    if attack_results.is_none() {
        attack_results = Some(attacks::run_all(addr, &stats).await?);
    }
    let _ = stop_tx.send(true);
    match tokio::time::timeout(Duration::from_secs(5), follower).await {
        Ok(Ok(Ok(_))) => {}
        Ok(Ok(Err(e))) => eprintln!("follower stopped: {e:#}"),
        Ok(Err(e)) => eprintln!("follower task: {e}"),
        Err(_) => eprintln!("follower did not stop within 5 s"),
    }
    bar.finish_and_clear();
    let mut reports: Vec<SensorReport> = Vec::new();
    for t in tasks {
        reports.push(t.await.context("sensor task")??);
    }

    // 5. The application verifies everything end to end, with its own trust list.
    let found = reconcile(addr, &trust, &db, &reports).await?;
    server.shutdown().await;

    // 6. Who may read what, over coaps://: pairing, tickets, refusals.
    let access = crate::demo_access::run(&dir, &say).await?;
    let summary = DemoSummary {
        sensors: opts.sensors,
        readings_acknowledged: reports.iter().map(|r| r.acknowledged.len()).sum(),
        readings_sent_non_confirmable: reports.iter().map(|r| r.sent_non_confirmable).sum(),
        readings_stored: found.stored as u64,
        readings_verified_by_application: found.verified,
        readings_failed_verification: found.failed,
        acknowledged_but_missing: found.missing,
        readings_pushed_to_follower: pushed.load(Ordering::Relaxed),
        follower_failed: follow_failed.load(Ordering::Relaxed),
        attacks: attack_results.unwrap_or_default(),
        server_counters: stats.snapshot(),
        database: db.display().to_string(),
        access,
    };
    Ok(summary)
}

/// A progress bar counting the seconds of `duration` (hidden when `quiet`).
pub fn progress_bar(quiet: bool, duration: Duration) -> ProgressBar {
    let bar = if quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(duration.as_secs().max(1))
    };
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len}s {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

/// What the application and the database say of the sensors' acknowledged readings.
pub struct Reconciled {
    /// Readings in the database.
    pub stored: usize,
    /// Readings the application verified end to end, and those it could not.
    pub verified: usize,
    pub failed: usize,
    /// Acknowledged readings that are not both stored and verified.
    pub missing: usize,
}

/// Runs the verifying application against the server at `addr` with its own `trust` list and
/// looks for every acknowledged reading among the stored (`db`) and verified ones.
pub async fn reconcile(
    addr: std::net::SocketAddr,
    trust: &HashSet<Identity>,
    db: &std::path::Path,
    reports: &[SensorReport],
) -> Result<Reconciled> {
    let transport = sigil_client::transport::Transport::open(
        addr,
        sigil_client::transport::Security::None,
        Default::default(),
    )
    .await?;
    let app = sigil_client::app::run(transport, Some(trust), &Default::default(), None).await?;
    let verified: HashSet<(String, u64)> = app
        .sensors
        .iter()
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
    Ok(Reconciled {
        stored: stored.len(),
        verified: app.verified(),
        failed: app.failed(),
        missing,
    })
}

pub fn print_summary(s: &DemoSummary) {
    println!("\nSigil demo: {} sensors", s.sensors);
    println!(
        "  readings acknowledged by the broker   {:>7}",
        s.readings_acknowledged
    );
    println!(
        "  readings stored (exact signed bytes)  {:>7}",
        s.readings_stored
    );
    println!(
        "  verified end to end by the app        {:>7}",
        s.readings_verified_by_application
    );
    println!(
        "  failed verification in the app        {:>7}",
        s.readings_failed_verification
    );
    println!(
        "  acknowledged but missing              {:>7}",
        s.acknowledged_but_missing
    );
    println!(
        "  pushed to the follower (Observe)      {:>7}",
        s.readings_pushed_to_follower
    );
    println!(
        "  failed verification in the follower   {:>7}",
        s.follower_failed
    );
    println!("\nattacks:");
    for a in &s.attacks {
        println!(
            "  [{}] {:<44} {}",
            if a.refused { "refused" } else { "ACCEPTED" },
            a.name,
            a.observed
        );
    }
    let a = &s.access;
    println!("\naccess control (coaps://):");
    println!(
        "  [{}] device paired from its label ({} B message), published {} readings",
        if a.paired && a.sensor_acknowledged > 0 {
            "ok"
        } else {
            "FAILED"
        },
        a.pairing_bytes,
        a.sensor_acknowledged
    );
    println!(
        "  [{}] subscriber without a ticket refused: {} without a session, {} with one",
        if a.read_without_session == "4.01" && a.read_without_ticket == "4.03" {
            "ok"
        } else {
            "FAILED"
        },
        a.read_without_session,
        a.read_without_ticket
    );
    println!(
        "  [{}] subscriber with a ticket ({} B) served: {} readings verified end to end",
        if a.verified_with_ticket > 0 {
            "ok"
        } else {
            "FAILED"
        },
        a.ticket_bytes,
        a.verified_with_ticket
    );
    println!(
        "  [{}] the sensor serving its own reading: {} without a ticket, {} with one ({} B, checked offline), verified: {}",
        if a.sensor_without_ticket == "4.01" && a.sensor_with_ticket == "2.05" && a.sensor_reading_verified { "ok" } else { "FAILED" },
        a.sensor_without_ticket,
        a.sensor_with_ticket,
        a.sensor_ticket_bytes,
        a.sensor_reading_verified
    );
    println!(
        "  [{}] the same ticket posted again: {}",
        if a.ticket_replayed == "4.01" {
            "ok"
        } else {
            "FAILED"
        },
        a.ticket_replayed
    );
    println!(
        "  [{}] PSK-only nodes published: {} MACed readings ({} B each), verified by the granted subscriber: {}; {} over the node's session only, taken on the broker's word: {}",
        if a.psk_mac_acknowledged > 0
            && a.psk_mac_verified == a.psk_mac_acknowledged
            && a.psk_session_acknowledged > 0
            && a.psk_session_unverifiable == a.psk_session_acknowledged
        {
            "ok"
        } else {
            "FAILED"
        },
        a.psk_mac_acknowledged,
        a.mac_reading_bytes,
        a.psk_mac_verified,
        a.psk_session_acknowledged,
        a.psk_session_unverifiable
    );
    println!("\nrejected by the server, by reason:");
    for (k, v) in &s.server_counters {
        if k.contains("rejected")
            || k.contains("malformed")
            || k.contains("duplicate")
            || k.contains("unexpected")
        {
            println!("  {k:<52} {v:>7}");
        }
    }
}
