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

use crate::sensor::{self, SensorReport, SensorRun};
use crate::storage::FileStorage;
use crate::util::{LOG_BYTES, LOG_COUNT_ONLY};
use anyhow::{Context, Result};
use sigil_client::os::OsRng;
use sigil_client::transport::Security;
use sigil_coap::message::option;
use sigil_coap::{BlockOption, Code, ContentFormat, Message, MessageBuilder, MessageType};
use sigil_crypto::{PublicKey, RustCrypto};
use sigil_device::{Device, DeviceConfig, Event, PublishOutcome};
use sigil_identity::KeyAnnouncement;
use sigil_server::{DtlsConfig, Server, ServerConfig, Stats};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::UdpSocket;
use tokio::sync::watch;

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
}

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
}

impl SoakReport {
    pub fn ok(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }
}

/// Log budget the soak holds the process to: the server's limiter allows 21 lines per kind
/// per 10 s window (crates/sigil-server/src/log.rs); 64 KB per window leaves room for the
/// sensors' own warnings.
const LOG_BYTES_PER_10S: u64 = 64 * 1024;

type Shared = Arc<Mutex<AttackLoad>>;

fn load(name: &'static str) -> Shared {
    Arc::new(Mutex::new(AttackLoad {
        name,
        ..Default::default()
    }))
}

fn note_sent(l: &Shared, n: usize) {
    if let Ok(mut l) = l.lock() {
        l.datagrams_sent += 1;
        l.bytes_sent += n as u64;
    }
}

fn note_answer(l: &Shared, request_len: usize, answer: &[u8]) {
    let code = match Message::parse(answer) {
        Ok(m) => m.code.to_string(),
        Err(_) => "dtls".into(),
    };
    if let Ok(mut l) = l.lock() {
        l.answers += 1;
        l.bytes_received += answer.len() as u64;
        if request_len > 0 {
            l.largest_ratio = l
                .largest_ratio
                .max(answer.len() as f64 / request_len as f64);
        }
        *l.codes.entry(code).or_insert(0) += 1;
    }
}

async fn bind(host: u8) -> Result<UdpSocket> {
    let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, host)), 0);
    UdpSocket::bind(addr)
        .await
        .with_context(|| format!("binding {addr} (the soak needs the whole 127.0.0.0/8 on lo)"))
}

/// One attack datagram (every field of the header the attacks vary).
#[allow(clippy::too_many_arguments)]
fn coap(
    mtype: MessageType,
    code: Code,
    mid: u16,
    path: &[&str],
    query: &[String],
    block1: Option<BlockOption>,
    cf: Option<u16>,
    payload: &[u8],
) -> Vec<u8> {
    let mut buf = vec![0u8; payload.len() + 512];
    let token = mid.to_be_bytes();
    let Ok(mut b) = MessageBuilder::new(&mut buf, mtype, code, mid, &token) else {
        return Vec::new();
    };
    for p in path {
        let _ = b.option(option::URI_PATH, p.as_bytes());
    }
    if let Some(cf) = cf {
        let _ = b.uint_option(option::CONTENT_FORMAT, u32::from(cf));
    }
    for q in query {
        let _ = b.option(option::URI_QUERY, q.as_bytes());
    }
    if let Some(b1) = block1 {
        if let Ok((v, n)) = b1.encode() {
            let _ = b.option(option::BLOCK1, &v[..n]);
        }
    }
    match b.finish_with_payload(payload) {
        Ok(n) => {
            buf.truncate(n);
            buf
        }
        Err(_) => Vec::new(),
    }
}

/// One attacking socket: sends requests under fresh message IDs and notes each answer
/// against the size of the request it answers (attack 5's measure).
struct Attacker {
    sock: Arc<UdpSocket>,
    load: Shared,
    /// Request length by message ID (at most 65,536 entries).
    sent: Arc<Mutex<BTreeMap<u16, usize>>>,
    reader: tokio::task::JoinHandle<()>,
    mid: u16,
}

impl Attacker {
    async fn open(host: u8, server: SocketAddr, load: Shared) -> Result<Self> {
        let sock = Arc::new(bind(host).await?);
        sock.connect(server).await?;
        let sent: Arc<Mutex<BTreeMap<u16, usize>>> = Arc::default();
        let (s, l, m) = (sock.clone(), load.clone(), sent.clone());
        let reader = tokio::spawn(async move {
            let mut buf = vec![0u8; 2048];
            while let Ok((n, _)) = s.recv_from(&mut buf).await {
                let answer = &buf[..n];
                let req_len = Message::parse(answer)
                    .ok()
                    .and_then(|msg| m.lock().ok()?.get(&msg.message_id).copied())
                    .unwrap_or(0);
                note_answer(&l, req_len, answer);
            }
        });
        Ok(Self {
            sock,
            load,
            sent,
            reader,
            mid: 0,
        })
    }

    /// Sends the CoAP message `d` under the next message ID.
    async fn send(&mut self, mut d: Vec<u8>) {
        if d.len() < 4 {
            return;
        }
        self.mid = self.mid.wrapping_add(1);
        d[2..4].copy_from_slice(&self.mid.to_be_bytes());
        if let Ok(mut s) = self.sent.lock() {
            s.insert(self.mid, d.len());
        }
        note_sent(&self.load, d.len());
        let _ = self.sock.send(&d).await;
    }
}

impl Drop for Attacker {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// The devices' endpoint names and keys, as anyone reads them from `/rd-lookup/res`.
#[derive(Clone)]
struct Victim {
    ep: String,
    key: PublicKey,
}

/// Attacks 1 and 2: forged registrations, lifetime changes and removals of every entry.
async fn control_plane(
    server: SocketAddr,
    victims: Vec<Victim>,
    entries: usize,
    l: Shared,
    mut stop: watch::Receiver<bool>,
) -> Result<()> {
    let mut a = Attacker::open(11, server, l).await?;
    while !*stop.borrow() {
        let mut out = Vec::new();
        for v in &victims {
            let mut links = String::from("</m>;rt=\"sigil.env\";ct=65100");
            if let Some(a) = KeyAnnouncement::new(v.key, b"") {
                let _ = a.emit(&mut links, [] as [PublicKey; 0]);
            }
            let q = vec![format!("ep={}", v.ep), "lt=60".into()];
            out.push(coap(
                MessageType::Confirmable,
                Code::POST,
                0,
                &["rd"],
                &q,
                None,
                Some(ContentFormat::LINK_FORMAT.0),
                links.as_bytes(),
            ));
        }
        for n in 1..=entries {
            let id = n.to_string();
            for lt in ["lt=1", "lt=60"] {
                out.push(coap(
                    MessageType::Confirmable,
                    Code::POST,
                    0,
                    &["rd", &id],
                    &[lt.into()],
                    None,
                    None,
                    &[],
                ));
            }
            out.push(coap(
                MessageType::Confirmable,
                Code::DELETE,
                0,
                &["rd", &id],
                &[],
                None,
                None,
                &[],
            ));
        }
        for d in out {
            a.send(d).await;
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = stop.changed() => {}
        }
    }
    Ok(())
}

/// Attacks 4 and 5: Confirmable requests with fresh message IDs whose full answers are large
/// (history, lookup, topic list), never repeating an Echo.
async fn reflector(server: SocketAddr, l: Shared, mut stop: watch::Receiver<bool>) -> Result<()> {
    let mut a = Attacker::open(12, server, l).await?;
    let requests = [
        coap(
            MessageType::Confirmable,
            Code::GET,
            0,
            &["ps", "1", "m"],
            &["n=100".into()],
            None,
            None,
            &[],
        ),
        coap(
            MessageType::Confirmable,
            Code::GET,
            0,
            &["rd-lookup", "res"],
            &[],
            None,
            None,
            &[],
        ),
        coap(
            MessageType::Confirmable,
            Code::GET,
            0,
            &["ps"],
            &[],
            None,
            None,
            &[],
        ),
    ];
    while !*stop.borrow() {
        // 2,000 requests a second, in bursts of 100.
        for i in 0..100 {
            a.send(requests[i % requests.len()].clone()).await;
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            _ = stop.changed() => {}
        }
    }
    Ok(())
}

/// Attack 6: 256 source ports each opening a Block1 registration and never finishing it.
async fn block1_holders(
    server: SocketAddr,
    l: Shared,
    mut stop: watch::Receiver<bool>,
) -> Result<()> {
    let mut socks = Vec::new();
    for _ in 0..256 {
        let s = bind(13).await?;
        s.connect(server).await?;
        socks.push(s);
    }
    let payload = vec![b'x'; 64];
    let mut mid = 0u16;
    while !*stop.borrow() {
        for s in &socks {
            mid = mid.wrapping_add(1);
            let d = coap(
                MessageType::Confirmable,
                Code::POST,
                mid,
                &["rd"],
                &["ep=hold".into()],
                Some(BlockOption::new(0, true, 2)),
                Some(ContentFormat::LINK_FORMAT.0),
                &payload,
            );
            note_sent(&l, d.len());
            let _ = s.send(&d).await;
            let mut buf = [0u8; 512];
            while let Ok(n) = s.try_recv(&mut buf) {
                note_answer(&l, d.len(), &buf[..n]);
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
            _ = stop.changed() => {}
        }
    }
    Ok(())
}

/// Attack 7: ClientHellos that return valid cookies, from 64 ports, as fast as the server
/// answers; each handshake is abandoned after the server's first flight.
async fn handshake_flood(
    server: SocketAddr,
    l: Shared,
    mut stop: watch::Receiver<bool>,
) -> Result<()> {
    let mut tasks = Vec::new();
    for i in 0..64u32 {
        let l = l.clone();
        let mut stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            let Ok(sock) = bind(14).await else { return };
            if sock.connect(server).await.is_err() {
                return;
            }
            let start = Instant::now();
            let identity = format!("flood-{i}");
            let mut buf = vec![0u8; 2048];
            let mut out = vec![0u8; sigil_dtls::MAX_DATAGRAM];
            // Every other port carries its handshakes as a CoAP resource (`PUT /dtls`).
            if i % 2 == 1 {
                coap_handshake_flood(&sock, &identity, start, &l, &mut stop).await;
                return;
            }
            while !*stop.borrow() {
                let now = crate::util::since(start);
                let creds = sigil_dtls::Credentials::Psk {
                    identity: identity.as_bytes(),
                    key: &[7u8; 16],
                };
                let Ok(mut conn) = sigil_dtls::Connection::connect(
                    RustCrypto,
                    sigil_dtls::NoTrust,
                    sigil_dtls::Config::default(),
                    &mut OsRng,
                    creds,
                    now,
                ) else {
                    return;
                };
                // ClientHello, HelloVerifyRequest, ClientHello with the cookie, then the
                // server's flight: stop there, leaving a half-open handshake behind.
                let mut flights = 0;
                while flights < 2 && !*stop.borrow() {
                    while let Some(n) = conn.poll_transmit(crate::util::since(start), &mut out) {
                        note_sent(&l, n);
                        let _ = sock.send(&out[..n]).await;
                    }
                    let got = tokio::select! {
                        r = tokio::time::timeout(Duration::from_millis(500), sock.recv(&mut buf)) => r,
                        _ = stop.changed() => break,
                    };
                    match got {
                        Ok(Ok(n)) => {
                            note_answer(&l, 0, &buf[..n]);
                            let _ = conn.handle_datagram(crate::util::since(start), &buf[..n]);
                            flights += 1;
                        }
                        _ => break,
                    }
                }
            }
        }));
    }
    let _ = stop.changed().await;
    for t in tasks {
        let _ = t.await;
    }
    Ok(())
}

/// Attack 7 over CoAP: `PUT /dtls`, its 4.01 with the HelloVerifyRequest, the `PUT` with the
/// cookie and the server's 2.01 (a session resource in its handshake); then the same again
/// from the same port, leaving each handshake half open.
async fn coap_handshake_flood(
    sock: &UdpSocket,
    identity: &str,
    start: Instant,
    l: &Shared,
    stop: &mut watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 2048];
    let mut out = vec![0u8; sigil_dtls_coap::MAX_DATAGRAM];
    while !*stop.borrow() {
        let creds = sigil_dtls::Credentials::Psk {
            identity: identity.as_bytes(),
            key: &[7u8; 16],
        };
        let Ok(mut hs) = sigil_dtls_coap::Client::connect(
            RustCrypto,
            sigil_dtls::NoTrust,
            sigil_dtls_coap::CarrierConfig::default(),
            &mut OsRng,
            creds,
            crate::util::since(start),
        ) else {
            return;
        };
        let mut answers = 0;
        while answers < 2 && !*stop.borrow() {
            while let Some(n) = hs.poll_transmit(crate::util::since(start), &mut out) {
                note_sent(l, n);
                let _ = sock.send(&out[..n]).await;
            }
            let got = tokio::select! {
                r = tokio::time::timeout(Duration::from_millis(500), sock.recv(&mut buf)) => r,
                _ = stop.changed() => break,
            };
            match got {
                Ok(Ok(n)) => {
                    note_answer(l, 0, &buf[..n]);
                    let now = crate::util::since(start);
                    if hs.handle_datagram(now, &buf[..n], &mut OsRng).is_err() {
                        break;
                    }
                    answers += 1;
                }
                _ => break,
            }
        }
    }
}

/// Attack 8: refused requests as fast as the socket takes them (1,000 a second).
async fn refusals(server: SocketAddr, l: Shared, mut stop: watch::Receiver<bool>) -> Result<()> {
    let mut a = Attacker::open(15, server, l).await?;
    let refused = coap(
        MessageType::Confirmable,
        Code::POST,
        0,
        &["rd"],
        &["ep=not-an-identity".into()],
        None,
        None,
        b"</x>",
    );
    while !*stop.borrow() {
        for _ in 0..50 {
            a.send(refused.clone()).await;
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            _ = stop.changed() => {}
        }
    }
    Ok(())
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
    let now = sigil_client::os::unix_now().as_secs();
    sigil_server::provision::import(&store, &labels, now, false)?;
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
    let bar = crate::demo::progress_bar(opts.quiet, opts.duration);
    let start = Instant::now();
    let mut next_progress = start + Duration::from_secs(60);
    while start.elapsed() < opts.duration && !*interrupted.borrow() {
        tokio::time::sleep(Duration::from_millis(500)).await;
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
    let seconds = start.elapsed().as_secs_f64();
    // The sensors settle what is in flight (re-registering where the attacks got through).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let _ = stop_tx.send(true);
    bar.finish_and_clear();
    let mut reports: Vec<SensorReport> = Vec::new();
    for t in tasks {
        reports.push(t.await.context("sensor task")??);
    }

    // The application verifies everything end to end.
    let found = crate::demo::reconcile(addr, &trust, &db, &reports).await?;
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
        },
        Check {
            what: "stored = verified, none failed verification".into(),
            ok: found.stored == found.verified && found.failed == 0,
            observed: format!(
                "{} stored, {} verified, {} failed",
                found.stored, found.verified, found.failed
            ),
        },
        Check {
            what: "no reading given up (refusals lead to re-registration and republication)".into(),
            ok: given_up == 0,
            observed: format!("{given_up} given up"),
        },
        Check {
            what: format!(
                "every sensor kept publishing (at least {expected_each} acknowledged each)"
            ),
            ok: fewest >= expected_each,
            observed: format!("fewest acknowledged by one sensor: {fewest}"),
        },
        Check {
            what: "coap:// answers to unverified sources are at most 3x their requests".into(),
            ok: reflect <= 3.0,
            observed: format!("largest answer/request ratio {reflect:.2}"),
        },
        Check {
            what: format!("log within {} KB per 10 s", LOG_BYTES_PER_10S / 1024),
            ok: log_bytes <= log_budget,
            observed: format!("{log_bytes} bytes in {seconds:.0} s"),
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
    });
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
    })
}

pub fn print_report(r: &SoakReport) {
    println!(
        "\nSigil soak: {:.0} s, {} coap:// and {} coaps:// sensors beside every attack",
        r.seconds, r.sensors, r.dtls_sensors
    );
    println!(
        "  readings acknowledged         {:>8}",
        r.readings_acknowledged
    );
    println!("  readings stored               {:>8}", r.readings_stored);
    println!("  verified by the application   {:>8}", r.readings_verified);
    println!(
        "  acknowledged but missing      {:>8}",
        r.acknowledged_but_missing
    );
    println!("  given up by a sensor          {:>8}", r.readings_given_up);
    println!("\nattacks (sent / answered, bytes out / in, largest answer/request):");
    for a in &r.attacks {
        println!(
            "  {:<52} {:>8} / {:<8} {:>10} / {:<10} {:>6.2}",
            a.name, a.datagrams_sent, a.answers, a.bytes_sent, a.bytes_received, a.largest_ratio
        );
        let codes: Vec<String> = a.codes.iter().map(|(c, n)| format!("{c}: {n}")).collect();
        println!("      answers {}", codes.join(", "));
    }
    println!("\nserver memory by its own accounting (peak / budget, bytes):");
    for m in &r.memory {
        println!(
            "  {:<24} {:>10} / {:<10}",
            m.table, m.peak_bytes, m.cap_bytes
        );
    }
    let (peak, cap) = r
        .memory
        .iter()
        .fold((0, 0), |(p, c), m| (p + m.peak_bytes, c + m.cap_bytes));
    println!(
        "  {:<24} {:>10} / {:<10} (sum of the tables' peaks)",
        "all tables", peak, cap
    );
    println!(
        "  process peak RSS (sensors, attackers and server together): {} KiB",
        r.peak_rss_kib
    );
    println!("  log written: {} bytes", r.log_bytes);
    println!("\nchecks:");
    for c in &r.checks {
        println!(
            "  [{}] {} ({})",
            if c.ok { "ok" } else { "FAILED" },
            c.what,
            c.observed
        );
    }
}
