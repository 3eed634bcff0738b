//! `sigil-bench observe`: CoAP Observe (RFC 7641) on one broker topic against polling it at
//! the same freshness.
//!
//! Each phase starts `sigil server` (the release binary beside this one) as its own process
//! with a fresh database, registers one sensor for real, signs its readings in advance (so the
//! load generator spends no CPU on signing) and publishes them at a fixed rate as Confirmable
//! PUTs. Beside it:
//!
//! - `observe`: N observers, each its own UDP socket spread over loopback addresses
//!   127.0.0.10.. ([`PER_ADDRESS`] to an address, under the server's default cap of 64
//!   observers a host), register with GET + Observe 0, answer the server's 4.01 Echo
//!   challenge, ACK every Confirmable notification and verify each reading end to end
//!   (`SignedReading::verify_end_to_end`, the sequence number above the last one taken).
//!   Latency: verification done minus the moment the PUT was sent, on the same clock.
//! - `poll`: the same N readers GET the topic once every publication interval, their polls
//!   spread evenly over the interval (reader i at (i + ½)/N of it after each publication's
//!   tick), after answering Echo once per address. Staleness: from
//!   the PUT to the verification of the poll that first saw the reading.
//! - a phase with nobody listening: the server's CPU for taking the readings alone.
//!
//! The server's CPU (all threads) is read before and after the timed phase from
//! /proc/<pid>/task/*/schedstat (nanoseconds), beside /proc/<pid>/stat (user + system in
//! 10 ms ticks, too coarse for a few hundred notifications); its counters come from the JSON `sigil server` prints on stderr
//! when it stops (SIGTERM).

use anyhow::{anyhow, bail, Context, Result};
use sigil_client::os::OsRng;
use sigil_client::CoapClient;
use sigil_coap::message::{empty, option};
use sigil_coap::{Code, Message, MessageBuilder, MessageType, TransmissionParameters};
use sigil_crypto::{CryptoProvider, PublicKey, RustCrypto};
use sigil_device::{Device, DeviceConfig, MemoryStorage};
use sigil_identity::Identity;
use sigil_objects::reading::sign_reading;
use sigil_objects::senml::{self, Record, Value};
use sigil_objects::{Freshness, ReadingFormat, SignedReading};
use sigil_time::Instant as DevInstant;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::UdpSocket;

/// Observers (or readers) per loopback address.
pub const PER_ADDRESS: usize = 50;

/// How long a request waits for its answer before it is sent again (setup) or counted lost
/// (a poll).
const ANSWER_WAIT: Duration = Duration::from_secs(2);

#[derive(Clone, Debug)]
pub struct Options {
    pub observers: Vec<usize>,
    pub rate: f64,
    pub publications: usize,
    pub runs: usize,
    pub sigil: Option<PathBuf>,
    /// Arguments added to `sigil server`'s command line (e.g. `--ack-timeout 200ms`).
    pub server_args: Vec<String>,
    /// Observers acknowledge each Confirmable notification this long after it arrived (a
    /// slow link's round trip), instead of at once.
    pub ack_delay: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Nobody listens: the readings alone.
    Ingest,
    Observe,
    Poll,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct Phase {
    pub mode: Mode,
    pub n: usize,
    pub publications: usize,
    /// Publications the server acknowledged with 2.04.
    pub acknowledged: usize,
    /// Readings verified at the observers/readers, each (reader, reading) once.
    pub delivered: usize,
    /// `n × publications - delivered`: readings an observer/reader never verified.
    pub missing: usize,
    /// Notifications or poll answers carrying a reading the receiver already had.
    pub repeated: usize,
    /// Readings that failed verification (never expected).
    pub failed: usize,
    /// Observers not registered, or whose observation ended (a notification without
    /// Observe), or polls unanswered within 2 s.
    pub lost: usize,
    /// Milliseconds from the PUT to verification: median and 99th percentile.
    pub latency_ms_median: f64,
    pub latency_ms_p99: f64,
    /// Observe only: from the PUT to the notification's arrival at the observer's socket
    /// being read (before verification).
    pub arrival_ms_median: f64,
    pub arrival_ms_p99: f64,
    /// Server CPU seconds during the timed phase: the sum of its threads' run time
    /// (/proc/<pid>/task/*/schedstat, nanoseconds).
    pub server_cpu_s: f64,
    /// The same from /proc/<pid>/stat (user + system, 10 ms ticks), as a cross-check.
    pub server_cpu_s_stat: f64,
    /// `observe.notified.non + .con` (observe), poll answers (poll), publications (ingest).
    pub sent: u64,
    /// Server CPU per notification / per fresh reading delivered / per publication, µs.
    pub server_cpu_us_per_delivery: f64,
    /// Server CPU per delivery beyond taking the readings in (the ingest phase's CPU per
    /// publication of the same run subtracted), µs.
    pub server_cpu_us_per_delivery_beyond_ingest: Option<f64>,
    pub seconds: f64,
    /// The server's counters about observers, and every counter that names a refusal or a
    /// loss, at shutdown.
    pub counters: BTreeMap<String, u64>,
}

/// The `sigil` binary: `--sigil`, or beside this one (target/release/sigil).
fn sigil_binary(given: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = given {
        return Ok(p.to_path_buf());
    }
    let me = std::env::current_exe()?;
    let p = me.with_file_name("sigil");
    if !p.exists() {
        bail!(
            "{} not found: build it first (cargo build --release -p sigil-cli) or pass --sigil",
            p.display()
        );
    }
    Ok(p)
}

/// `sigil server` as its own process, killed when dropped.
struct ServerProcess {
    child: std::process::Child,
    addr: SocketAddr,
    stderr: PathBuf,
    _dir: tempfile::TempDir,
    store: sigil_server::Store,
}

impl ServerProcess {
    async fn start(sigil: &Path, extra: &[String]) -> Result<Self> {
        let dir = tempfile::tempdir()?;
        let db = dir.path().join("bench.db");
        let store = sigil_server::Store::open(&db)?;
        let port = std::net::UdpSocket::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let stderr = dir.path().join("server.err");
        let child = std::process::Command::new(sigil)
            .args(["server", "--no-dtls", "--listen", &addr.to_string(), "--db"])
            .arg(&db)
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&stderr)?)
            .spawn()
            .with_context(|| format!("starting {}", sigil.display()))?;
        let s = Self {
            child,
            addr,
            stderr,
            _dir: dir,
            store,
        };
        wait_ready(addr).await?;
        Ok(s)
    }

    /// CPU seconds: (the sum of every thread's schedstat run time, in ns; /proc/<pid>/stat
    /// in 10 ms ticks).
    fn cpu(&self) -> Result<(f64, f64)> {
        let pid = self.child.id();
        let mut ns = 0u64;
        for t in std::fs::read_dir(format!("/proc/{pid}/task"))? {
            let t = t?.path().join("schedstat");
            if let Ok(s) = std::fs::read_to_string(t) {
                ns += s
                    .split_whitespace()
                    .next()
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
        Ok((ns as f64 / 1e9, process_cpu_seconds(pid)?))
    }

    /// Stops the server with SIGTERM and reads the counters it prints.
    fn stop(mut self) -> Result<BTreeMap<String, u64>> {
        let pid = self.child.id().to_string();
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()?;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if self.child.try_wait()?.is_some() {
                break;
            }
            if Instant::now() > deadline {
                bail!("sigil server did not stop within 20 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let text = std::fs::read_to_string(&self.stderr)?;
        let start = text
            .rfind("\n{")
            .map(|i| i + 1)
            .or_else(|| text.starts_with('{').then_some(0))
            .with_context(|| format!("no counters on the server's stderr:\n{text}"))?;
        Ok(serde_json::from_str(&text[start..])?)
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// User + system CPU seconds of a process and all its threads, from /proc (USER_HZ = 100).
fn process_cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .context("reading /proc (Linux only)")?;
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("malformed /proc stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11).context("no utime")?.parse()?;
    let stime: f64 = fields.get(12).context("no stime")?.parse()?;
    Ok((utime + stime) / 100.0)
}

/// Waits until a CoAP ping to `addr` is answered.
async fn wait_ready(addr: SocketAddr) -> Result<()> {
    let mut c = CoapClient::connect(addr, TransmissionParameters::default()).await?;
    for _ in 0..200 {
        c.send_raw(&[0x40, 0x00, 0x00, 0x01]).await?;
        if c.recv_raw(Duration::from_millis(100)).await.is_some() {
            return Ok(());
        }
    }
    bail!("sigil server did not start")
}

/// One registered sensor with its readings signed in advance: `readings[0]` is published
/// before the phase (so a topic has a latest reading), the rest during it.
struct Sensor {
    topic: String,
    key: PublicKey,
    id: Identity,
    first_seq: u64,
    readings: Vec<Vec<u8>>,
}

async fn sensor(server: &ServerProcess, count: usize) -> Result<Sensor> {
    let mut storage = MemoryStorage::default();
    let mut dev = Device::boot(
        RustCrypto,
        DeviceConfig::default(),
        &mut storage,
        &mut OsRng,
        &[],
        &[],
    )
    .map_err(|e| anyhow!("{e}"))?;
    server.store.add_identity(
        dev.identity(),
        sigil_server::store::IdentityKind::Device,
        "bench",
        sigil_client::os::unix_now().as_secs(),
    )?;
    let mut c = CoapClient::connect(server.addr, TransmissionParameters::default()).await?;
    dev.handle_timeout(DevInstant::from_millis(0), &mut storage)
        .map_err(|e| anyhow!("{e}"))?;
    let mut buf = [0u8; 2048];
    let n = dev.poll_transmit(&mut buf).context("registration")?;
    c.send_raw(&buf[..n]).await?;
    let resp = c
        .recv_raw(Duration::from_secs(5))
        .await
        .context("no registration answer")?;
    dev.handle_datagram(DevInstant::from_millis(1), &mut storage, &resp)
        .map_err(|e| anyhow!("{e}"))?;
    anyhow::ensure!(dev.is_registered(), "bench sensor not registered");
    let topic = format!(
        "ps/{}/m",
        dev.location()
            .unwrap_or("rd/0")
            .rsplit('/')
            .next()
            .unwrap_or("0")
    );
    let secret = storage.key.clone().context("key")?;
    let key = RustCrypto.public_key(&secret).map_err(|e| anyhow!("{e}"))?;
    let id = *dev.identity();
    let first_seq = dev.next_sequence() + 1;
    let mut readings = Vec::new();
    for i in 0..count as u64 {
        let r = [Record {
            name: Some("t"),
            unit: Some("Cel"),
            value: Some(Value::Number(20.0 + (i % 64) as f64 / 16.0)),
            ..Default::default()
        }];
        let mut sb = [0u8; 128];
        let sn = senml::encode_cbor(&r, &mut sb)?;
        let mut scratch = [0u8; 512];
        let mut out = [0u8; 512];
        let n = sign_reading(
            &RustCrypto,
            &secret,
            &id,
            ReadingFormat::Cose,
            &Freshness {
                seq: first_seq + i,
                lsb_bits: None,
                timestamp: None,
            },
            &sb[..sn],
            &mut scratch,
            &mut out,
        )
        .map_err(|e| anyhow!("{e}"))?;
        readings.push(out[..n].to_vec());
    }
    Ok(Sensor {
        topic,
        key,
        id,
        first_seq,
        readings,
    })
}

/// What every observer and reader shares: the clock, when each reading's PUT was sent
/// (nanoseconds after `t0`, 0 not yet), and how to check a reading.
struct Shared {
    t0: Instant,
    sent: Vec<AtomicU64>,
    first_seq: u64,
    last_seq: u64,
    key: PublicKey,
    id: Identity,
    topic: String,
    server: SocketAddr,
    ack_delay: Duration,
}

impl Shared {
    fn ns(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64
    }

    /// Verifies `raw` end to end, numbered above `last`: its sequence number, or why not.
    fn check(&self, raw: &[u8], last: u64) -> Result<u64, Check> {
        let r = SignedReading::parse(ReadingFormat::Cose, raw).map_err(|_| Check::Failed)?;
        let seq = r.full_seq().ok_or(Check::Failed)?;
        if seq <= last {
            return Err(Check::Repeated);
        }
        let mut scratch = vec![0u8; r.scratch_len()];
        r.verify_end_to_end(&RustCrypto, &self.key, &self.id, seq, &mut scratch)
            .map_err(|_| Check::Failed)?;
        Ok(seq)
    }

    /// Milliseconds since reading `seq`'s PUT was sent, at `at_ns`.
    fn since_sent_ms(&self, seq: u64, at_ns: u64) -> Option<f64> {
        let i = seq.checked_sub(self.first_seq)? as usize;
        let sent = self.sent.get(i)?.load(Ordering::Acquire);
        (sent != 0).then(|| at_ns.saturating_sub(sent) as f64 / 1e6)
    }
}

enum Check {
    Repeated,
    Failed,
}

/// What one observer or reader saw.
#[derive(Default)]
struct Tally {
    delivered: usize,
    repeated: usize,
    failed: usize,
    lost: usize,
    latency_ms: Vec<f64>,
    arrival_ms: Vec<f64>,
}

fn address(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, 10 + (i / PER_ADDRESS) as u8))
}

fn request(mid: u16, token: &[u8], path: &str, observe: bool, echo: Option<&[u8]>) -> Vec<u8> {
    let mut buf = vec![0u8; 128];
    let mut b = MessageBuilder::new(&mut buf, MessageType::Confirmable, Code::GET, mid, token)
        .expect("fits");
    if observe {
        b.uint_option(option::OBSERVE, 0).expect("fits");
    }
    b.uri_path(path).expect("fits");
    if let Some(e) = echo {
        b.option(option::ECHO, e).expect("fits");
    }
    let n = b.finish();
    buf.truncate(n);
    buf
}

/// Sends a Confirmable GET (again after [`ANSWER_WAIT`], four times at most) and returns
/// the answer with its token; a 4.01 with Echo is answered once with that value.
async fn get_answered(
    sock: &UdpSocket,
    mid: &mut u16,
    token: &[u8],
    path: &str,
    observe: bool,
) -> Result<(Code, Option<u32>, Vec<u8>)> {
    let mut echo: Option<Vec<u8>> = None;
    let mut buf = vec![0u8; 2048];
    for _ in 0..2 {
        *mid = mid.wrapping_add(1);
        let req = request(*mid, token, path, observe, echo.as_deref());
        let mut answer = None;
        'tries: for _ in 0..4 {
            sock.send(&req).await?;
            let until = tokio::time::Instant::now() + ANSWER_WAIT;
            loop {
                let n = match tokio::time::timeout_at(until, sock.recv(&mut buf)).await {
                    Err(_) => continue 'tries,
                    Ok(r) => r?,
                };
                let Ok(m) = Message::parse(&buf[..n]) else {
                    continue;
                };
                if m.token == token && m.code.is_response() {
                    if m.mtype == MessageType::Confirmable {
                        sock.send(&empty(MessageType::Acknowledgement, m.message_id))
                            .await?;
                    }
                    answer = Some((
                        m.code,
                        m.observe(),
                        m.payload.to_vec(),
                        m.option(option::ECHO).map(<[u8]>::to_vec),
                    ));
                    break 'tries;
                }
            }
        }
        let (code, obs, payload, e) = answer.context("no answer")?;
        match e {
            Some(e) if code == Code::UNAUTHORIZED && echo.is_none() => echo = Some(e),
            _ => return Ok((code, obs, payload)),
        }
    }
    bail!("4.01 again after answering Echo")
}

/// One observer: registers, then takes notifications until it has the last reading or
/// `stop` says so.
async fn observer(
    i: usize,
    shared: Arc<Shared>,
    ready: tokio::sync::mpsc::Sender<Result<()>>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Tally {
    let mut t = Tally::default();
    let sock = match UdpSocket::bind((address(i), 0)).await {
        Ok(s) => s,
        Err(e) => {
            let _ = ready.send(Err(e.into())).await;
            t.lost += 1;
            return t;
        }
    };
    if let Err(e) = sock.connect(shared.server).await {
        let _ = ready.send(Err(e.into())).await;
        t.lost += 1;
        return t;
    }
    let token = (i as u32 ^ 0x5a5a_0000).to_be_bytes();
    let mut mid = (i as u16).wrapping_mul(97);
    let registered = get_answered(&sock, &mut mid, &token, &shared.topic, true).await;
    let mut last = 0u64;
    match registered {
        Ok((Code::CONTENT, Some(_), payload)) => {
            if let Ok(seq) = shared.check(&payload, 0) {
                last = seq;
            }
            let _ = ready.send(Ok(())).await;
        }
        Ok((code, obs, _)) => {
            let _ = ready
                .send(Err(anyhow!(
                    "observer {i} not registered: {code} (Observe {obs:?})"
                )))
                .await;
            t.lost += 1;
            return t;
        }
        Err(e) => {
            let _ = ready.send(Err(e.context(format!("observer {i}")))).await;
            t.lost += 1;
            return t;
        }
    }
    let sock = Arc::new(sock);
    let mut buf = vec![0u8; 2048];
    while last < shared.last_seq {
        let n = tokio::select! {
            r = sock.recv(&mut buf) => match r { Ok(n) => n, Err(_) => break },
            _ = stop.changed() => break,
        };
        let arrived = shared.ns();
        let Ok(m) = Message::parse(&buf[..n]) else {
            continue;
        };
        if !m.code.is_response() {
            continue;
        }
        if m.token != token {
            if m.mtype != MessageType::Acknowledgement {
                let _ = sock.send(&empty(MessageType::Reset, m.message_id)).await;
            }
            continue;
        }
        if m.mtype == MessageType::Confirmable {
            let ack = empty(MessageType::Acknowledgement, m.message_id);
            if shared.ack_delay.is_zero() {
                let _ = sock.send(&ack).await;
            } else {
                let (sock, wait) = (sock.clone(), shared.ack_delay);
                tokio::spawn(async move {
                    tokio::time::sleep(wait).await;
                    let _ = sock.send(&ack).await;
                });
            }
        }
        if m.code != Code::CONTENT || m.observe().is_none() {
            // A notification that is not 2.05 with Observe ends the observation (§3.2).
            t.lost += 1;
            break;
        }
        match shared.check(m.payload, last) {
            Ok(seq) => {
                let done = shared.ns();
                last = seq;
                t.delivered += 1;
                if let (Some(l), Some(a)) = (
                    shared.since_sent_ms(seq, done),
                    shared.since_sent_ms(seq, arrived),
                ) {
                    t.latency_ms.push(l);
                    t.arrival_ms.push(a);
                }
            }
            Err(Check::Repeated) => t.repeated += 1,
            Err(Check::Failed) => t.failed += 1,
        }
    }
    t
}

/// One polling reader: answers Echo once, then GETs the topic every `interval` from
/// `offset` after `start` until `stop`.
async fn reader(
    i: usize,
    shared: Arc<Shared>,
    ready: tokio::sync::mpsc::Sender<Result<()>>,
    go: tokio::sync::watch::Receiver<Option<tokio::time::Instant>>,
    mut stop: tokio::sync::watch::Receiver<bool>,
    interval: Duration,
    offset: Duration,
) -> Tally {
    let mut t = Tally::default();
    let sock = match UdpSocket::bind((address(i), 0)).await {
        Ok(s) => s,
        Err(e) => {
            let _ = ready.send(Err(e.into())).await;
            t.lost += 1;
            return t;
        }
    };
    if let Err(e) = sock.connect(shared.server).await {
        let _ = ready.send(Err(e.into())).await;
        t.lost += 1;
        return t;
    }
    let token = (i as u32 ^ 0xa5a5_0000).to_be_bytes();
    let mut mid = (i as u16).wrapping_mul(97);
    let mut last = 0u64;
    match get_answered(&sock, &mut mid, &token, &shared.topic, false).await {
        Ok((Code::CONTENT, _, payload)) => {
            if let Ok(seq) = shared.check(&payload, 0) {
                last = seq;
            }
            let _ = ready.send(Ok(())).await;
        }
        Ok((code, _, _)) => {
            let _ = ready
                .send(Err(anyhow!("reader {i}: first GET answered {code}")))
                .await;
            t.lost += 1;
            return t;
        }
        Err(e) => {
            let _ = ready.send(Err(e.context(format!("reader {i}")))).await;
            t.lost += 1;
            return t;
        }
    }
    let mut go = go;
    let start = loop {
        if let Some(s) = *go.borrow_and_update() {
            break s;
        }
        if go.changed().await.is_err() {
            return t;
        }
    };
    let mut tick = tokio::time::interval_at(start + offset, interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut buf = vec![0u8; 2048];
    loop {
        tokio::select! {
            _ = tick.tick() => {},
            _ = stop.changed() => break,
        }
        if *stop.borrow() {
            break;
        }
        mid = mid.wrapping_add(1);
        let req = request(mid, &token, &shared.topic, false, None);
        if sock.send(&req).await.is_err() {
            t.lost += 1;
            continue;
        }
        let until = tokio::time::Instant::now() + ANSWER_WAIT;
        let answer = loop {
            let n = match tokio::time::timeout_at(until, sock.recv(&mut buf)).await {
                Err(_) => break None,
                Ok(Err(_)) => break None,
                Ok(Ok(n)) => n,
            };
            let Ok(m) = Message::parse(&buf[..n]) else {
                continue;
            };
            if m.token == token && m.message_id == mid && m.code.is_response() {
                break Some((m.code, m.payload.to_vec()));
            }
        };
        let arrived = shared.ns();
        match answer {
            Some((Code::CONTENT, payload)) => match shared.check(&payload, last) {
                Ok(seq) => {
                    let done = shared.ns();
                    last = seq;
                    t.delivered += 1;
                    if let (Some(l), Some(a)) = (
                        shared.since_sent_ms(seq, done),
                        shared.since_sent_ms(seq, arrived),
                    ) {
                        t.latency_ms.push(l);
                        t.arrival_ms.push(a);
                    }
                }
                Err(Check::Repeated) => t.repeated += 1,
                Err(Check::Failed) => t.failed += 1,
            },
            _ => t.lost += 1,
        }
    }
    t
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// The counters worth reporting: the observers', and any refusal or loss.
fn interesting(all: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    all.iter()
        .filter(|(k, v)| {
            **v > 0
                && (k.starts_with("observe.")
                    || k.contains("refused")
                    || k.contains("drop")
                    || k.contains("lost")
                    || k.contains("full")
                    || k.contains("error")
                    || k.contains("overload")
                    || k.contains("not_remembered")
                    || k.contains("gave_up")
                    || k.contains("unexpected"))
        })
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

/// A signed reading's PUT to `topic`.
fn put<'a>(topic: &'a str, raw: &'a [u8]) -> sigil_client::RequestSpec<'a> {
    sigil_client::RequestSpec {
        path: topic,
        content_format: Some(18),
        payload: raw,
        ..Default::default()
    }
}

/// One timed phase with its own server.
async fn phase(sigil: &Path, mode: Mode, n: usize, o: &Options) -> Result<Phase> {
    let server = ServerProcess::start(sigil, &o.server_args).await?;
    let s = sensor(&server, o.publications + 1).await?;
    let interval = Duration::from_secs_f64(1.0 / o.rate);
    let shared = Arc::new(Shared {
        t0: Instant::now(),
        sent: (0..s.readings.len()).map(|_| AtomicU64::new(0)).collect(),
        first_seq: s.first_seq,
        last_seq: s.first_seq + o.publications as u64,
        key: s.key,
        id: s.id,
        topic: s.topic.clone(),
        server: server.addr,
        ack_delay: o.ack_delay,
    });
    let mut publisher = CoapClient::connect(server.addr, TransmissionParameters::default()).await?;
    let first = publisher
        .request(Code::PUT, &put(&s.topic, &s.readings[0]))
        .await?;
    if first.code != Code::CHANGED {
        bail!("the first reading was answered {}", first.code);
    }
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel(n.max(1));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (go_tx, go_rx) = tokio::sync::watch::channel(None);
    let mut tasks = Vec::new();
    for i in 0..n {
        let sh = shared.clone();
        let r = ready_tx.clone();
        let st = stop_rx.clone();
        tasks.push(match mode {
            Mode::Observe => tokio::spawn(observer(i, sh, r, st)),
            Mode::Poll => tokio::spawn(reader(
                i,
                sh,
                r,
                go_rx.clone(),
                st,
                interval,
                interval.mul_f64((i as f64 + 0.5) / n as f64),
            )),
            Mode::Ingest => unreachable!(),
        });
        if i % 50 == 49 {
            // Registrations in bursts of 50, as a start-up would not all come at once.
            tokio::task::yield_now().await;
        }
    }
    drop(ready_tx);
    let mut refused = Vec::new();
    for _ in 0..n {
        match ready_rx.recv().await {
            Some(Ok(())) => {}
            Some(Err(e)) => refused.push(format!("{e:#}")),
            None => break,
        }
    }
    if !refused.is_empty() {
        eprintln!("  {} of {n} not set up, e.g. {}", refused.len(), refused[0]);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let cpu_before = server.cpu()?;
    let start = Instant::now();
    let tstart = tokio::time::Instant::now();
    go_tx.send_replace(Some(tstart + interval / 4));
    let mut tick = tokio::time::interval_at(tstart + interval / 4, interval);
    let mut acknowledged = 0;
    for (k, raw) in s.readings.iter().enumerate().skip(1) {
        tick.tick().await;
        shared.sent[k].store(shared.ns().max(1), Ordering::Release);
        let r = publisher.request(Code::PUT, &put(&s.topic, raw)).await?;
        if r.code == Code::CHANGED {
            acknowledged += 1;
        }
    }
    // Observers end on the last reading; readers poll one interval more.
    let grace = match mode {
        Mode::Poll => interval + Duration::from_millis(50),
        _ => Duration::from_secs(3),
    };
    let end = tokio::time::Instant::now() + grace;
    let mut tallies = Vec::new();
    let stopper = tokio::spawn(async move {
        tokio::time::sleep_until(end).await;
        stop_tx.send_replace(true);
    });
    for t in tasks {
        tallies.push(t.await?);
    }
    let seconds = start.elapsed().as_secs_f64();
    let cpu_after = server.cpu()?;
    let server_cpu = cpu_after.0 - cpu_before.0;
    let server_cpu_ticks = cpu_after.1 - cpu_before.1;
    stopper.abort();
    let all = server.stop()?;
    let mut latency: Vec<f64> = tallies.iter().flat_map(|t| t.latency_ms.clone()).collect();
    let mut arrival: Vec<f64> = tallies.iter().flat_map(|t| t.arrival_ms.clone()).collect();
    latency.sort_by(f64::total_cmp);
    arrival.sort_by(f64::total_cmp);
    let delivered: usize = tallies.iter().map(|t| t.delivered).sum();
    let sent = match mode {
        Mode::Observe => {
            all.get("observe.notified.non").copied().unwrap_or(0)
                + all.get("observe.notified.con").copied().unwrap_or(0)
        }
        Mode::Poll => delivered as u64,
        Mode::Ingest => acknowledged as u64,
    };
    Ok(Phase {
        mode,
        n,
        publications: o.publications,
        acknowledged,
        delivered,
        missing: (n * o.publications).saturating_sub(delivered),
        repeated: tallies.iter().map(|t| t.repeated).sum(),
        failed: tallies.iter().map(|t| t.failed).sum(),
        lost: tallies.iter().map(|t| t.lost).sum(),
        latency_ms_median: percentile(&latency, 0.5),
        latency_ms_p99: percentile(&latency, 0.99),
        arrival_ms_median: percentile(&arrival, 0.5),
        arrival_ms_p99: percentile(&arrival, 0.99),
        server_cpu_s: server_cpu,
        server_cpu_s_stat: server_cpu_ticks,
        sent,
        server_cpu_us_per_delivery: server_cpu * 1e6 / sent.max(1) as f64,
        server_cpu_us_per_delivery_beyond_ingest: None,
        seconds,
        counters: interesting(&all),
    })
}

/// One run: the ingest phase, then each N observed and polled.
pub async fn run_once(o: &Options, run: usize) -> Result<Vec<Phase>> {
    let sigil = sigil_binary(o.sigil.as_deref())?;
    let mut phases = Vec::new();
    let mut plan = vec![(Mode::Ingest, 0)];
    for &n in &o.observers {
        plan.push((Mode::Observe, n));
        plan.push((Mode::Poll, n));
    }
    for (mode, n) in plan {
        eprintln!(
            "run {run}: {mode:?} with {n} {}, {} readings at {}/s ...",
            if mode == Mode::Poll {
                "readers"
            } else {
                "observers"
            },
            o.publications,
            o.rate
        );
        let p = if mode == Mode::Ingest {
            ingest(&sigil, o).await?
        } else {
            phase(&sigil, mode, n, o).await?
        };
        eprintln!(
            "  delivered {}/{} (missing {}, repeated {}, failed {}, lost {}), median {:.2} ms, p99 {:.2} ms, server {:.3} s CPU = {:.1} µs per delivery; {:?}",
            p.delivered, n * o.publications, p.missing, p.repeated, p.failed, p.lost,
            p.latency_ms_median, p.latency_ms_p99, p.server_cpu_s, p.server_cpu_us_per_delivery,
            p.counters
        );
        phases.push(p);
    }
    let ingest_us = phases
        .iter()
        .find(|p| p.mode == Mode::Ingest)
        .map(|p| p.server_cpu_s * 1e6 / p.acknowledged.max(1) as f64);
    for p in phases.iter_mut().filter(|p| p.mode != Mode::Ingest) {
        if let Some(per_pub) = ingest_us {
            let beyond = p.server_cpu_s * 1e6 - per_pub * p.acknowledged as f64;
            p.server_cpu_us_per_delivery_beyond_ingest = Some(beyond / p.sent.max(1) as f64);
        }
    }
    Ok(phases)
}

/// The readings alone: nobody observes or polls.
async fn ingest(sigil: &Path, o: &Options) -> Result<Phase> {
    let server = ServerProcess::start(sigil, &o.server_args).await?;
    let s = sensor(&server, o.publications + 1).await?;
    let interval = Duration::from_secs_f64(1.0 / o.rate);
    let mut publisher = CoapClient::connect(server.addr, TransmissionParameters::default()).await?;
    let mut acknowledged = 0;
    publisher
        .request(Code::PUT, &put(&s.topic, &s.readings[0]))
        .await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let cpu_before = server.cpu()?;
    let start = Instant::now();
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval / 4, interval);
    for raw in &s.readings[1..] {
        tick.tick().await;
        if publisher
            .request(Code::PUT, &put(&s.topic, raw))
            .await?
            .code
            == Code::CHANGED
        {
            acknowledged += 1;
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let cpu_after = server.cpu()?;
    let server_cpu = cpu_after.0 - cpu_before.0;
    let server_cpu_ticks = cpu_after.1 - cpu_before.1;
    let all = server.stop()?;
    Ok(Phase {
        mode: Mode::Ingest,
        n: 0,
        publications: o.publications,
        acknowledged,
        delivered: 0,
        missing: 0,
        repeated: 0,
        failed: 0,
        lost: 0,
        latency_ms_median: f64::NAN,
        latency_ms_p99: f64::NAN,
        arrival_ms_median: f64::NAN,
        arrival_ms_p99: f64::NAN,
        server_cpu_s: server_cpu,
        server_cpu_s_stat: server_cpu_ticks,
        sent: acknowledged as u64,
        server_cpu_us_per_delivery: server_cpu * 1e6 / acknowledged.max(1) as f64,
        server_cpu_us_per_delivery_beyond_ingest: None,
        seconds,
        counters: interesting(&all),
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Prints each run, then the medians over runs: one table per measure.
pub fn print(runs: &[Vec<Phase>], o: &Options) {
    let find = |r: &Vec<Phase>, m: Mode, n: usize| -> Option<Phase> {
        r.iter().find(|p| p.mode == m && p.n == n).cloned()
    };
    let med = |m: Mode, n: usize, f: &dyn Fn(&Phase) -> f64| -> f64 {
        median(
            runs.iter()
                .filter_map(|r| find(r, m, n))
                .map(|p| f(&p))
                .collect(),
        )
    };
    let ratio = |n: usize, f: &dyn Fn(&Phase, &Phase) -> f64| -> f64 {
        median(
            runs.iter()
                .filter_map(|r| Some(f(&find(r, Mode::Poll, n)?, &find(r, Mode::Observe, n)?)))
                .collect(),
        )
    };
    println!(
        "{} runs, {} readings at {}/s per phase; medians over runs (ratios taken within each run)",
        runs.len(),
        o.publications,
        o.rate
    );
    println!();
    println!("latency, PUT sent to reading verified (ms)");
    println!(
        "{:>6} | {:>12} {:>10} {:>14} {:>12} | {:>15} {:>12} | {:>8}",
        "N",
        "observe med",
        "obs p99",
        "arrival med",
        "arrival p99",
        "poll stale med",
        "poll p99",
        "ratio"
    );
    for &n in &o.observers {
        println!(
            "{:>6} | {:>12.2} {:>10.2} {:>14.2} {:>12.2} | {:>15.2} {:>12.2} | {:>8.1}",
            n,
            med(Mode::Observe, n, &|p| p.latency_ms_median),
            med(Mode::Observe, n, &|p| p.latency_ms_p99),
            med(Mode::Observe, n, &|p| p.arrival_ms_median),
            med(Mode::Observe, n, &|p| p.arrival_ms_p99),
            med(Mode::Poll, n, &|p| p.latency_ms_median),
            med(Mode::Poll, n, &|p| p.latency_ms_p99),
            ratio(n, &|p, ob| p.latency_ms_median / ob.latency_ms_median),
        );
    }
    println!();
    println!(
        "server CPU (µs) per reading delivered: a notification, or a poll that saw a new reading"
    );
    println!(
        "{:>6} | {:>10} {:>14} {:>10} | {:>10} {:>14} {:>10} | {:>8}",
        "N", "observe", "beyond ingest", "sent", "poll", "beyond ingest", "fresh", "ratio"
    );
    println!(
        "{:>6} | {:>10.1} (server CPU per reading taken in, nobody listening)",
        0,
        med(Mode::Ingest, 0, &|p| p.server_cpu_us_per_delivery)
    );
    for &n in &o.observers {
        println!(
            "{:>6} | {:>10.1} {:>14.1} {:>10.0} | {:>10.1} {:>14.1} {:>10.0} | {:>8.1}",
            n,
            med(Mode::Observe, n, &|p| p.server_cpu_us_per_delivery),
            med(Mode::Observe, n, &|p| p
                .server_cpu_us_per_delivery_beyond_ingest
                .unwrap_or(f64::NAN)),
            med(Mode::Observe, n, &|p| p.sent as f64),
            med(Mode::Poll, n, &|p| p.server_cpu_us_per_delivery),
            med(Mode::Poll, n, &|p| p
                .server_cpu_us_per_delivery_beyond_ingest
                .unwrap_or(f64::NAN)),
            med(Mode::Poll, n, &|p| p.sent as f64),
            ratio(n, &|p, ob| p.server_cpu_us_per_delivery
                / ob.server_cpu_us_per_delivery),
        );
    }
    println!();
    println!("delivery (summed over runs)");
    println!(
        "{:>6} {:>8} | {:>9} {:>8} {:>8} {:>8} {:>6}",
        "N", "mode", "expected", "missing", "repeated", "failed", "lost"
    );
    for &n in &o.observers {
        for m in [Mode::Observe, Mode::Poll] {
            let ps: Vec<Phase> = runs.iter().filter_map(|r| find(r, m, n)).collect();
            println!(
                "{:>6} {:>8} | {:>9} {:>8} {:>8} {:>8} {:>6}",
                n,
                format!("{m:?}").to_lowercase(),
                ps.iter().map(|p| p.n * p.publications).sum::<usize>(),
                ps.iter().map(|p| p.missing).sum::<usize>(),
                ps.iter().map(|p| p.repeated).sum::<usize>(),
                ps.iter().map(|p| p.failed).sum::<usize>(),
                ps.iter().map(|p| p.lost).sum::<usize>(),
            );
        }
    }
}
