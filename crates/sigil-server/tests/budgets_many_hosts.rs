//! Signatures and signature verifications an attacker with many addresses cannot spend, against
//! the real server (in-process, on real UDP sockets) attacked from hundreds of loopback
//! addresses (127.0.x.y) beside honest devices on addresses of their own. Every bound asserted
//! is the server's own accounting (its counters), never a timing.
//!
//! (a) 400 addresses replay a device's public latest reading asking for a signed answer: a
//!     device that requires signed answers still registers (signed 2.01) and publishes, and
//!     the 4.09s signed stay within their own budget (none toward an address the device never
//!     used).
//! (b) 256 addresses send forged P-256 readings with a registered `kid` and fresh numbers,
//!     forged registration statements (`sq`/`ss`) and forged ES256 tokens at `/authz-info`:
//!     the failed verifications stay within the verification budget, the rest are refused
//!     (`verify.refused.*`), and an honest device's readings are acknowledged during the
//!     flood, and a newcomer registers.
//! (c) the last-used addresses of 16 devices spoofed, each replaying its device's reading
//!     asking for a signed 4.09: another device that lost its state gets its 4.09s signed.
//! (d) forged P-256 readings from the addresses of 8 proven devices: the other proven
//!     devices' readings are acknowledged throughout, none refused.
//! (e) a captured fresh reading sent 30 times in one batch costs one verification.

use sigil_coap::{option, Code, Message, MessageBuilder, MessageType};
use sigil_crypto::{CryptoProvider, PublicKey, RustCrypto, SecretKey, SignatureAlgorithm};
use sigil_device::{Device, DeviceConfig, Event, MemoryStorage, PublishOutcome};
use sigil_identity::Identity;
use sigil_objects::answer;
use sigil_objects::senml::{Record, Value};
use sigil_server::answers::AnswerRates;
use sigil_server::store::IdentityKind;
use sigil_server::verify::VerifyRates;
use sigil_server::{DtlsConfig, Server, ServerConfig, ServerHandle, Stats, Store};
use sigil_testkit::Seeded;
use sigil_time::Instant;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sigil_testkit::server as common;

/// The first `n` attacking addresses: 127.0.1.1 onwards, never an honest device's.
fn ipv4_attackers(n: usize) -> Vec<IpAddr> {
    (0..n)
        .map(|i| v4(127, 0, 1 + (i / 250) as u8, 1 + (i % 250) as u8))
        .collect()
}

/// Binds one UDP socket on each address.
fn attackers(addrs: &[IpAddr]) -> Vec<UdpSocket> {
    addrs
        .iter()
        .map(|a| {
            let s = UdpSocket::bind((*a, 0)).expect("bind an attacking address");
            s.set_nonblocking(true).unwrap();
            s
        })
        .collect()
}

fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(a, b, c, d))
}

async fn start(db: &Path, listen: IpAddr, dtls: bool) -> ServerHandle {
    let mut config = ServerConfig::new(SocketAddr::new(listen, 0), db.to_path_buf());
    config.service.verify_workers = 2;
    if dtls {
        config.dtls = Some(DtlsConfig::new(SocketAddr::new(listen, 0)));
    }
    Server::start(config, Stats::default()).await.unwrap()
}

/// The floods of this file run one at a time: each is a machine's worth of datagrams.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What an honest device did, shared with its thread.
#[derive(Default)]
struct Seen {
    events: Vec<(u64, Event)>,
    /// Every datagram it sent, with when.
    sent: Vec<(u64, Vec<u8>)>,
    /// The address it sends from.
    local: Option<SocketAddr>,
}

/// A device (`sigil_device`) on its own address, in its own thread: it registers, then
/// publishes a reading every `every` until stopped.
struct Node {
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Device<RustCrypto>>>,
}

fn boot(seed: u64, algorithm: SignatureAlgorithm) -> (Device<RustCrypto>, MemoryStorage) {
    let mut storage = MemoryStorage::default();
    let config = DeviceConfig {
        algorithm,
        require_signed_answers: true,
        ..DeviceConfig::default()
    };
    let device = Device::boot(
        RustCrypto,
        config,
        &mut storage,
        &mut Seeded(seed),
        &[],
        &[],
    )
    .expect("boot");
    (device, storage)
}

fn provision(db: &Path, id: &Identity) {
    Store::open(db)
        .unwrap()
        .add_identity(id, IdentityKind::Device, "", 0)
        .unwrap();
}

/// A device booted from `seed`, provisioned in `db`.
fn provisioned(
    db: &Path,
    seed: u64,
    algorithm: SignatureAlgorithm,
) -> (Device<RustCrypto>, MemoryStorage) {
    let d = boot(seed, algorithm);
    provision(db, d.0.identity());
    d
}

impl Node {
    fn spawn(
        (mut device, mut storage): (Device<RustCrypto>, MemoryStorage),
        trusted: PublicKey,
        bind: IpAddr,
        server: SocketAddr,
        every: Duration,
        clock: std::time::Instant,
    ) -> Self {
        device.trust_server_key(trusted);
        let seen = Arc::new(Mutex::new(Seen::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (seen.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let sock = UdpSocket::bind((bind, 0)).unwrap();
            s.lock().unwrap().local = sock.local_addr().ok();
            sock.set_read_timeout(Some(Duration::from_millis(5)))
                .unwrap();
            let ms = || clock.elapsed().as_millis() as u64;
            let mut next = 0u64;
            let mut buf = [0u8; 2048];
            let mut v = 0.0;
            while !st.load(Ordering::Relaxed) {
                let now = ms();
                let _ = device.handle_timeout(Instant::from_millis(now), &mut storage);
                if device.is_registered() && now >= next {
                    next = now + every.as_millis() as u64;
                    v += 1.0;
                    let r = [Record {
                        name: Some("t"),
                        unit: Some("Cel"),
                        value: Some(Value::Number(v)),
                        ..Default::default()
                    }];
                    let _ = device.publish(Instant::from_millis(now), &mut storage, &r, None);
                }
                while let Some(n) = device.poll_transmit(&mut buf) {
                    let _ = sock.send_to(&buf[..n], server);
                    s.lock().unwrap().sent.push((now, buf[..n].to_vec()));
                }
                while let Some(e) = device.poll_event() {
                    s.lock().unwrap().events.push((now, e));
                }
                if let Ok((n, from)) = sock.recv_from(&mut buf) {
                    if from == server {
                        let _ = device.handle_datagram(
                            Instant::from_millis(ms()),
                            &mut storage,
                            &buf[..n],
                        );
                    }
                }
            }
            device
        });
        Self {
            seen,
            stop,
            thread: Some(thread),
        }
    }

    fn registered(&self) -> bool {
        self.seen
            .lock()
            .unwrap()
            .events
            .iter()
            .any(|(_, e)| *e == Event::Registered)
    }

    /// Readings acknowledged at or after `since` (ms of the test's clock).
    fn acknowledged_since(&self, since: u64) -> usize {
        self.seen
            .lock()
            .unwrap()
            .events
            .iter()
            .filter(|(t, e)| {
                *t >= since
                    && matches!(
                        e,
                        Event::Published {
                            outcome: PublishOutcome::Acknowledged,
                            ..
                        }
                    )
            })
            .count()
    }

    /// The first datagram it sent with `code` to a path starting with `path`.
    fn first_sent(&self, code: Code, path: &str) -> Option<Vec<u8>> {
        let seen = self.seen.lock().unwrap();
        seen.sent
            .iter()
            .map(|(_, d)| d)
            .find(|d| {
                Message::parse(d).is_ok_and(|m| {
                    m.code == code
                        && m.uri_path()
                            .next()
                            .is_some_and(|p| p.is_ok_and(|p| p == path))
                })
            })
            .cloned()
    }

    /// The address it sends from.
    fn local(&self) -> SocketAddr {
        self.seen.lock().unwrap().local.expect("bound")
    }

    /// Readings answered 5.03 or refused at or after `since`.
    fn deferred_since(&self, since: u64) -> usize {
        self.seen
            .lock()
            .unwrap()
            .events
            .iter()
            .filter(|(t, e)| {
                *t >= since
                    && matches!(
                        e,
                        Event::Published {
                            outcome: PublishOutcome::Deferred { .. } | PublishOutcome::Rejected(_),
                            ..
                        }
                    )
            })
            .count()
    }

    fn stop(mut self) -> Device<RustCrypto> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

/// A node for each of `devices`, the `i`th at 127.0.`subnet`.(1 + `i`).
fn spawn_all(
    devices: Vec<(Device<RustCrypto>, MemoryStorage)>,
    key: PublicKey,
    subnet: u8,
    to: SocketAddr,
    every: Duration,
    clock: std::time::Instant,
) -> Vec<Node> {
    devices
        .into_iter()
        .enumerate()
        .map(|(i, d)| {
            let at = v4(127, 0, subnet, 1 + i as u8);
            Node::spawn(d, key, at, to, every, clock)
        })
        .collect()
}

/// Waits until `f` holds, for at most `secs` seconds.
fn wait_for(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let until = std::time::Instant::now() + Duration::from_secs(secs);
    while std::time::Instant::now() < until {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

/// What [`rebuild`] does with each option: its new value, or `None` to leave it out.
type Edit<'a> = &'a dyn Fn(u16, &[u8]) -> Option<Vec<u8>>;

/// `m` again as a Confirmable request with message ID `mid`: its options with `edit` applied
/// (a value replaced, or the option left out), then `extra` options, and `payload`.
fn rebuild(
    m: &Message<'_>,
    mid: u16,
    edit: Edit<'_>,
    extra: &[(u16, Vec<u8>)],
    payload: &[u8],
) -> Vec<u8> {
    let mut buf = vec![0u8; 2048];
    let token = mid.to_be_bytes();
    let mut b =
        MessageBuilder::new(&mut buf, MessageType::Confirmable, m.code, mid, &token).unwrap();
    for o in m.options() {
        if let Some(v) = edit(o.number, o.value) {
            b.option(o.number, &v).unwrap();
        }
    }
    for (n, v) in extra {
        b.option(*n, v).unwrap();
    }
    let n = b.finish_with_payload(payload).unwrap();
    buf.truncate(n);
    buf
}

/// Sends from every socket `i`, one round every `period` until stopped, the datagram
/// `datagram(i, kind)` with `kind` going round `0..kinds`, each time under a new message ID.
fn flood(
    sockets: &[UdpSocket],
    to: SocketAddr,
    period: Duration,
    stop: &AtomicBool,
    kinds: usize,
    datagram: impl Fn(usize, usize) -> Vec<u8>,
) -> usize {
    // Made once: sending costs the attacker nothing but the datagram.
    let made: Vec<Vec<Vec<u8>>> = (0..sockets.len())
        .map(|i| (0..kinds).map(|k| datagram(i, k)).collect())
        .collect();
    let mut sent = 0;
    let mut round = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let t = std::time::Instant::now();
        for (i, s) in sockets.iter().enumerate() {
            let mut d = made[i][(i + round) % kinds].clone();
            let mid = (i * 7 + round * 1031) as u16;
            d[2..4].copy_from_slice(&mid.to_be_bytes());
            if s.send_to(&d, to).is_ok() {
                sent += 1;
            }
            // Drain answers so the socket buffers never matter.
            let mut b = [0u8; 512];
            while s.recv_from(&mut b).is_ok() {}
        }
        round += 1;
        if let Some(rest) = period.checked_sub(t.elapsed()) {
            std::thread::sleep(rest);
        }
    }
    sent
}

/// A flood on a thread of its own (see [`flood`]), from when it started on the test's clock.
struct Flooder {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<usize>,
    started: f64,
}

impl Flooder {
    /// Starts the flood and lets it run 1.5 s.
    fn start(
        clock: std::time::Instant,
        sockets: Vec<UdpSocket>,
        to: SocketAddr,
        period: Duration,
        kinds: usize,
        datagram: impl Fn(usize, usize) -> Vec<u8> + Send + 'static,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let started = clock.elapsed().as_secs_f64();
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || flood(&sockets, to, period, &stop, kinds, datagram))
        };
        std::thread::sleep(Duration::from_millis(1500));
        Self {
            stop,
            thread,
            started,
        }
    }

    /// Stops the flood: the datagrams it sent, and the seconds it ran (one more).
    fn stop(self, clock: std::time::Instant) -> (usize, f64) {
        self.stop.store(true, Ordering::Relaxed);
        let sent = self.thread.join().unwrap();
        (sent, clock.elapsed().as_secs_f64() - self.started + 1.0)
    }
}

/// The server's counters whose names start with one of `prefixes`.
fn counters(stats: &Stats, prefixes: &[&str]) -> Vec<(String, u64)> {
    stats
        .snapshot()
        .into_iter()
        .filter(|(k, _)| prefixes.iter().any(|p| k.starts_with(p)))
        .collect()
}

/// The most operations a set of rates allows in `secs` seconds.
fn allowed(total_burst: f64, total_per_second: f64, secs: f64) -> u64 {
    (total_burst + total_per_second * secs).ceil() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replays_from_400_addresses_never_spend_the_signatures_registrations_need() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let clock = std::time::Instant::now();
    // A device whose latest reading is public, and a newcomer that requires signed answers.
    let (a, b) = (
        provisioned(&db, 11, SignatureAlgorithm::Ed25519),
        provisioned(&db, 12, SignatureAlgorithm::Ed25519),
    );
    let server = start(&db, v4(127, 0, 0, 1), false).await;
    let to = server.local_addr;
    let stats = server.stats.clone();
    let key = server.answer_key;
    let a = Node::spawn(
        a,
        key,
        v4(127, 0, 0, 1),
        to,
        Duration::from_millis(500),
        clock,
    );
    assert!(
        wait_for(20, || a.acknowledged_since(0) >= 1),
        "the first device publishes"
    );
    let reading = a.first_sent(Code::PUT, "ps").expect("a publication");
    // The replay: the same publication, asking for a signed answer.
    let replay = move |i: usize, _: usize| {
        let reading = Message::parse(&reading).unwrap();
        rebuild(
            &reading,
            i as u16,
            &|_, v| Some(v.to_vec()),
            &[(answer::REQUIRE_OPTION, vec![])],
            reading.payload,
        )
    };
    let sockets = attackers(&ipv4_attackers(400));
    // 400 addresses at 10 a second each: 4,000 replays a second.
    let flooder = Flooder::start(clock, sockets, to, Duration::from_millis(100), 1, replay);
    let since = clock.elapsed().as_millis() as u64;
    let b = Node::spawn(
        b,
        key,
        v4(127, 0, 0, 2),
        to,
        Duration::from_millis(300),
        clock,
    );
    let served = wait_for(25, || b.registered() && b.acknowledged_since(since) >= 3);
    let (replays, secs) = flooder.stop(clock);
    let b = b.stop();
    a.stop();
    eprintln!(
        "{replays} replays from 400 addresses in {secs:.0} s; counters: {:?}",
        counters(&stats, &["answer.", "verify.", "publish.", "register."])
    );
    assert!(
        served,
        "a device requiring signed answers registers and publishes during the flood"
    );
    assert_eq!(b.stats.bad_answer_signatures, 0);
    assert!(
        stats.get("publish.rejected.replay") >= 1000,
        "the flood arrived"
    );
    // The 4.09s toward addresses the device never used went out as the bare Reset, counted.
    assert!(
        stats.get("answer.unsigned.resync_other_address") >= 1000,
        "replays from other addresses are refused a signed 4.09"
    );
    let r = AnswerRates::default().resync;
    assert!(
        stats.get("answer.signed.resync") <= allowed(r.total_burst, r.total_per_second, secs),
        "signed 4.09s within their own budget"
    );
    // The registrations' answers were signed (2 devices registered, at least).
    assert!(stats.get("answer.signed") - stats.get("answer.signed.resync") >= 2);
    assert_eq!(stats.get("answer.unsigned.total_budget"), 0);
    // A replay costs no verification: the number at or below the mark refuses it first.
    assert!(
        stats.get("verify.performed") < 100,
        "{} verifications",
        stats.get("verify.performed")
    );
    server.shutdown().await;
}

/// (c) The last-used addresses (address and port) of 16 devices spoofed, each replaying its
/// device's recorded reading asking for a signed answer at 20 a second: a device that really
/// lost state still gets its 4.09 signed, from its own address, every time it asks (five
/// times; before 4.09s were charged per device, some went out unsigned: the total was empty).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spoofing_16_devices_addresses_never_spends_another_devices_signed_4_09() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let clock = std::time::Instant::now();
    let devices: Vec<_> = (0..17u64)
        .map(|i| provisioned(&db, 100 + i, SignatureAlgorithm::Ed25519))
        .collect();
    let server = start(&db, v4(127, 0, 0, 1), false).await;
    let to = server.local_addr;
    let stats = server.stats.clone();
    let key = server.answer_key;
    let nodes = spawn_all(devices, key, 4, to, Duration::from_millis(400), clock);
    assert!(
        wait_for(30, || nodes.iter().all(|n| n.acknowledged_since(0) >= 1)),
        "the devices publish"
    );
    // Each device's address and a reading it published; then the devices stop, and their
    // addresses are the attacker's (and the last one's, the device that lost its state).
    let last: Vec<(SocketAddr, Vec<u8>)> = nodes
        .into_iter()
        .map(|n| {
            let at = n.local();
            let put = n.first_sent(Code::PUT, "ps").expect("a publication");
            n.stop();
            (at, put)
        })
        .collect();
    let replay_of = |put: &[u8], mid: u16| {
        let m = Message::parse(put).unwrap();
        rebuild(
            &m,
            mid,
            &|_, v| Some(v.to_vec()),
            &[(answer::REQUIRE_OPTION, vec![])],
            m.payload,
        )
    };
    let spoofed: Vec<UdpSocket> = last[..16]
        .iter()
        .map(|(at, _)| {
            let s = UdpSocket::bind(at).expect("bind a device's address");
            s.set_nonblocking(true).unwrap();
            s
        })
        .collect();
    let puts: Vec<Vec<u8>> = last[..16].iter().map(|(_, p)| p.clone()).collect();
    // 16 addresses at 20 a second each.
    let flooder = Flooder::start(
        clock,
        spoofed,
        to,
        Duration::from_millis(50),
        1,
        move |i, _| replay_of(&puts[i], i as u16),
    );
    // The device that lost its state sends an old number from its own address, five times.
    let (at, put) = &last[16];
    let me = UdpSocket::bind(at).expect("bind the device's address");
    me.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut signed = 0;
    let mut answers = Vec::new();
    for k in 0..5u16 {
        let mid = 40_000 + k;
        let _ = me.send_to(&replay_of(put, mid), to);
        let until = std::time::Instant::now() + Duration::from_secs(3);
        let mut buf = [0u8; 1024];
        while std::time::Instant::now() < until {
            let Ok((n, from)) = me.recv_from(&mut buf) else {
                continue;
            };
            let Ok(m) = Message::parse(&buf[..n]) else {
                continue;
            };
            if from != to || m.message_id != mid {
                continue;
            }
            let has_signature = m.options().any(|o| o.number == answer::SIGNATURE_OPTION);
            answers.push((m.code, has_signature));
            if m.code == Code(answer::RESYNC_CODE) && has_signature {
                signed += 1;
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let (replays, secs) = flooder.stop(clock);
    eprintln!(
        "{replays} replays from 16 devices' addresses in {secs:.0} s; the device's answers {answers:?}; counters: {:?}",
        counters(&stats, &["answer.", "publish."])
    );
    assert!(
        stats.get("publish.rejected.replay") >= 300,
        "the flood arrived"
    );
    assert_eq!(
        signed, 5,
        "the device that lost its state gets a signed 4.09 each time: {answers:?}"
    );
    // The spoofed devices' own buckets refused the rest, counted, and the 4.09s signed stay
    // within 16 devices' buckets and the device's own five.
    assert!(stats.get("answer.unsigned.resync_device_budget") >= 100);
    let r = AnswerRates::default().resync;
    assert!(
        stats.get("answer.signed.resync")
            <= 16 * allowed(r.host_burst, r.host_per_second, secs) + 5
    );
    assert_eq!(stats.get("answer.unsigned.resync_total_budget"), 0);
    server.shutdown().await;
}

/// (d) Forged P-256 readings (a registered `kid`, fresh numbers) sent from the addresses of 8
/// proven devices (each had readings verified there) at 200 a second each: the other proven
/// devices' readings are acknowledged throughout, none refused; the spoofed hosts' failures
/// past their small share move them to the strangers' pool (`verify.demoted`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgeries_from_8_proven_addresses_never_starve_the_other_proven_devices() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let clock = std::time::Instant::now();
    let devices: Vec<_> = (0..10u64)
        .map(|i| provisioned(&db, 200 + i, SignatureAlgorithm::EcdsaP256))
        .collect();
    let kids: Vec<Identity> = devices.iter().map(|d| *d.0.identity()).collect();
    let server = start(&db, v4(127, 0, 0, 1), false).await;
    let to = server.local_addr;
    let stats = server.stats.clone();
    let key = server.answer_key;
    let nodes = spawn_all(devices, key, 5, to, Duration::from_millis(250), clock);
    assert!(
        wait_for(30, || nodes.iter().all(|n| n.acknowledged_since(0) >= 2)),
        "the devices publish"
    );
    // Forgeries for each of the first eight devices, from its own address.
    let forged: Vec<Vec<Vec<u8>>> = nodes[..8]
        .iter()
        .zip(&kids)
        .map(|(n, kid)| {
            let put = n.first_sent(Code::PUT, "ps").expect("a publication");
            let m = Message::parse(&put).unwrap();
            let senml = cose_payload(m.payload);
            (0..40u64)
                .map(|k| {
                    let reading = forged_reading(kid, 600 + k, &senml);
                    rebuild(&m, 0, &|_, v| Some(v.to_vec()), &[], &reading)
                })
                .collect()
        })
        .collect();
    let sockets = attackers(&(0..8).map(|i| v4(127, 0, 5, 1 + i)).collect::<Vec<_>>());
    // 8 addresses at 200 a second each.
    let flooder = Flooder::start(
        clock,
        sockets,
        to,
        Duration::from_millis(5),
        40,
        move |i, k| forged[i][k].clone(),
    );
    let since = clock.elapsed().as_millis() as u64;
    let honest = &nodes[8..];
    let served = wait_for(40, || {
        honest.iter().all(|n| n.acknowledged_since(since) >= 16)
    });
    let acknowledged: Vec<usize> = honest.iter().map(|n| n.acknowledged_since(since)).collect();
    let deferred: Vec<usize> = honest.iter().map(|n| n.deferred_since(since)).collect();
    let (sent, secs) = flooder.stop(clock);
    for n in nodes {
        n.stop();
    }
    eprintln!(
        "{sent} forgeries from 8 proven addresses in {secs:.0} s; the other devices acknowledged {acknowledged:?}, deferred {deferred:?}; counters: {:?}",
        counters(&stats, &["verify.", "publish."])
    );
    assert!(stats.get("verify.failed") > 0, "the forgeries arrived");
    assert!(
        served,
        "the other proven devices' readings are acknowledged during the flood: {acknowledged:?}"
    );
    assert_eq!(
        deferred,
        vec![0, 0],
        "no reading of the other proven devices was refused for the budget"
    );
    assert!(
        stats.get("verify.demoted") >= 8,
        "the spoofed proven hosts were moved to the strangers' pool, counted"
    );
    let r = VerifyRates::default();
    // Failures as proven: the failure share, and one for each move to the strangers (the
    // spoofed devices' own readings prove their hosts again now and then).
    let bound = [r.proven_failures, r.strangers, r.newcomers]
        .iter()
        .map(|p| allowed(p.total_burst, p.total_per_second, secs))
        .sum::<u64>()
        + stats.get("verify.demoted");
    assert!(
        stats.get("verify.failed") <= bound,
        "failed verifications {} within the budget {bound}",
        stats.get("verify.failed")
    );
    server.shutdown().await;
}

/// (e) A fresh reading captured on the path (made by its device, never delivered) sent 30
/// times in one batch from 30 addresses: one verification in all. The copies take the first's
/// result and are refused by its number once it is stored. (The server's dispatcher, in
/// memory, so that the 30 are one batch.)
#[test]
fn a_captured_reading_sent_30_times_in_one_batch_is_verified_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let mut storage = MemoryStorage::default();
    let config = DeviceConfig {
        algorithm: SignatureAlgorithm::EcdsaP256,
        ..DeviceConfig::default()
    };
    let mut device =
        Device::boot(RustCrypto, config, &mut storage, &mut Seeded(300), &[], &[]).unwrap();
    provision(&db, device.identity());
    let (mut d, stats, _) = common::plain_dispatcher(&db, 42, |c| c.service.verify_workers = 2);
    let wall = sigil_time::UnixTime::from_secs(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64,
    );
    let at: SocketAddr = "127.0.0.3:40000".parse().unwrap();
    let mut buf = [0u8; 2048];
    for ms in (0..20_000u64).step_by(100) {
        if device.is_registered() {
            break;
        }
        let now = Instant::from_millis(ms);
        let _ = device.handle_timeout(now, &mut storage);
        let mut batch = Vec::new();
        while let Some(n) = device.poll_transmit(&mut buf) {
            batch.push((at, buf[..n].to_vec()));
        }
        for (_, answer) in d.handle_at(batch, now, wall) {
            let _ = device.handle_datagram(now, &mut storage, &answer);
        }
    }
    assert!(device.is_registered(), "the device registers");
    // A reading made and captured on the path, never delivered by the device.
    let now = Instant::from_millis(30_000);
    let r = [Record {
        name: Some("t"),
        unit: Some("Cel"),
        value: Some(Value::Number(21.5)),
        ..Default::default()
    }];
    device
        .publish(now, &mut storage, &r, None)
        .expect("a reading");
    let n = device.poll_transmit(&mut buf).expect("the publication");
    let captured = buf[..n].to_vec();
    let captured = Message::parse(&captured).unwrap();
    let batch: Vec<(SocketAddr, Vec<u8>)> = ipv4_attackers(30)
        .into_iter()
        .enumerate()
        .map(|(i, a)| {
            let copy = rebuild(
                &captured,
                1000 + i as u16,
                &|_, v| Some(v.to_vec()),
                &[],
                captured.payload,
            );
            (SocketAddr::new(a, 5683), copy)
        })
        .collect();
    let performed = stats.get("verify.performed");
    let answers = d.handle_at(batch, now, wall);
    let s = stats.snapshot();
    eprintln!(
        "30 copies of a captured reading in one batch; counters: {:?}",
        s.iter()
            .filter(|(k, _)| k.starts_with("verify.") || k.starts_with("publish."))
            .collect::<Vec<_>>()
    );
    assert_eq!(answers.len(), 30, "every copy is answered");
    assert_eq!(stats.get("publish.accepted"), 1, "stored once");
    assert_eq!(
        stats.get("publish.rejected.replay"),
        29,
        "the other copies are refused as replays"
    );
    assert_eq!(
        stats.get("verify.performed") - performed,
        1,
        "one verification for all the copies"
    );
    assert_eq!(stats.get("verify.skipped_copy"), 29);
}

/// A forged COSE_Sign1 reading claiming `kid`, numbered `seq`, with a signature that does not
/// verify (it parses, so checking it costs a whole P-256 verification).
fn forged_reading(kid: &Identity, seq: u64, senml: &[u8]) -> Vec<u8> {
    use sigil_objects::cose::{encode_protected, encode_sign1, SeqField};
    let mut protected = [0u8; 128];
    let n = encode_protected(
        -7,
        kid.as_bytes(),
        SeqField::Full(seq),
        None,
        &mut protected,
    )
    .unwrap();
    let mut out = vec![0u8; 512];
    let m = encode_sign1(&protected[..n], senml, &[0x5a; 64], &mut out).unwrap();
    out.truncate(m);
    out
}

/// The SenML payload of a COSE_Sign1 reading.
fn cose_payload(reading: &[u8]) -> Vec<u8> {
    use sigil_objects::cbor::{Decoder, Item};
    let mut d = Decoder::new(reading);
    assert!(matches!(d.item().unwrap(), Item::Tag(18)));
    assert_eq!(d.array().unwrap(), 4);
    d.bytes().unwrap();
    d.skip().unwrap();
    d.bytes().unwrap().to_vec()
}

/// An ES256 token for `subject` at `audience` that passes every cheap check but is signed by a
/// key that is not the AC's.
fn forged_token(audience: &str, subject: &str, cti: u32, exp: i64) -> Vec<u8> {
    use sigil_ace::token::{encode_signed, Claims};
    use sigil_ace::{Confirmation, Permissions, Scope, ScopeEntry};
    let k = SecretKey::from_bytes(SignatureAlgorithm::EcdsaP256, &[0x33; 32]).unwrap();
    let pop = RustCrypto.public_key(&k).unwrap();
    let entries = [ScopeEntry {
        object: "rd",
        permissions: Permissions(1),
    }];
    let cti = cti.to_be_bytes();
    let claims = Claims {
        sub: Some(subject),
        aud: Some(audience),
        exp: Some(sigil_time::UnixTime::from_secs(exp)),
        cti: Some(&cti),
        scope: Some(Scope::new(&entries)),
        cnf: Some(Confirmation::PublicKey {
            kid: None,
            key: pop,
        }),
        ..Claims::new()
    };
    let mut out = vec![0u8; 1024];
    let n = encode_signed(&claims, None, &k, &RustCrypto, &mut out).unwrap();
    out.truncate(n);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verification_flood_from_256_addresses_stays_within_the_budget() {
    verification_flood(
        v4(127, 0, 0, 1),
        ipv4_attackers(256),
        v4(127, 0, 0, 1),
        v4(127, 0, 0, 2),
    )
    .await;
}

/// A /56 on `lo` (its 256 /64s are 256 hosts): one address in each, and two honest addresses
/// in /56s of their own, added for the test and removed after it. None if the machine refuses.
struct Slash56;

/// Documentation space (RFC 3849), apart from other tests' prefixes.
const PREFIX_56: [u16; 3] = [0x2001, 0xdb8, 0x5a00];

impl Slash56 {
    fn attackers() -> Vec<IpAddr> {
        (0..256u16)
            .map(|i| {
                IpAddr::V6(Ipv6Addr::new(
                    PREFIX_56[0],
                    PREFIX_56[1],
                    PREFIX_56[2],
                    i,
                    0,
                    0,
                    0,
                    1,
                ))
            })
            .collect()
    }

    /// The honest device's and the newcomer's addresses.
    fn honest() -> [IpAddr; 2] {
        [
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0x5b00, 0, 0, 0, 0, 1)),
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0x5c00, 0, 0, 0, 0, 1)),
        ]
    }

    fn all() -> Vec<IpAddr> {
        let mut a = Self::attackers();
        a.extend(Self::honest());
        a
    }

    /// `ip -6 addr <verb>` of every address on `lo`.
    fn ip(verb: &str) -> Option<bool> {
        use std::io::Write;
        let mut batch = String::new();
        for a in Self::all() {
            let nodad = if verb == "add" { " nodad" } else { "" };
            batch.push_str(&format!("addr {verb} {a}/128 dev lo{nodad}\n"));
        }
        let mut child = std::process::Command::new("ip")
            .args(["-6", "-force", "-batch", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .ok()?;
        child.stdin.take()?.write_all(batch.as_bytes()).ok()?;
        Some(child.wait().ok()?.success())
    }

    fn add() -> Option<Self> {
        if Self::ip("add") != Some(true) {
            return None;
        }
        let me = Self;
        for a in Self::all() {
            UdpSocket::bind((a, 0)).ok()?;
        }
        Some(me)
    }
}

impl Drop for Slash56 {
    fn drop(&mut self) {
        let _ = Self::ip("del");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verification_flood_from_an_ipv6_slash_56_stays_within_the_budget() {
    let Some(_net) = Slash56::add() else {
        eprintln!(
            "the IPv6 /56 variant did not run: this machine refused `ip -6 addr add` on lo \
             (not root, or no IPv6); the IPv4 test covers the same budget"
        );
        return;
    };
    let [honest, newcomer] = Slash56::honest();
    verification_flood(
        IpAddr::V6(Ipv6Addr::LOCALHOST),
        Slash56::attackers(),
        honest,
        newcomer,
    )
    .await;
}

/// (b) from `attacking` against a server on `listen`, beside an honest device on `honest` and
/// a newcomer on `newcomer_at`.
async fn verification_flood(
    listen: IpAddr,
    attacking: Vec<IpAddr>,
    honest: IpAddr,
    newcomer_at: IpAddr,
) {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let clock = std::time::Instant::now();
    let v = provisioned(&db, 21, SignatureAlgorithm::EcdsaP256);
    let n = provisioned(&db, 22, SignatureAlgorithm::EcdsaP256);
    let kid = *v.0.identity();
    let server = start(&db, listen, true).await;
    let to = server.local_addr;
    let stats = server.stats.clone();
    let key = server.answer_key;
    let audience = Identity::of_key(&RustCrypto, &server.dtls.as_ref().unwrap().key, b"")
        .unwrap()
        .to_string();
    let v = Node::spawn(v, key, honest, to, Duration::from_millis(200), clock);
    assert!(
        wait_for(20, || v.acknowledged_since(0) >= 2),
        "the honest device publishes"
    );
    let put = v.first_sent(Code::PUT, "ps").expect("a publication");
    let payload = Message::parse(&put).unwrap().payload.to_vec();
    let senml = cose_payload(&payload);
    let seq = sigil_objects::SignedReading::parse(sigil_objects::ReadingFormat::Cose, &payload)
        .map(|r| match r.seq {
            sigil_objects::cose::SeqField::Full(s) => s,
            _ => 0,
        })
        .unwrap();
    let reg = v.first_sent(Code::POST, "rd").expect("a registration");
    assert!(
        Message::parse(&reg).unwrap().block1().is_none(),
        "the registration fits one datagram"
    );
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let subject = kid.to_string();
    // Three kinds of forgery, in turn from each address: a reading with a fresh number, a
    // registration statement above the mark, an ES256 token.
    let forge = move |i: usize, kind: usize| -> Vec<u8> {
        let mid = i as u16;
        let (put, reg) = (Message::parse(&put).unwrap(), Message::parse(&reg).unwrap());
        match kind {
            0 => rebuild(
                &put,
                mid,
                &|_, v| Some(v.to_vec()),
                &[],
                &forged_reading(&kid, seq + 500 + (i % 400) as u64, &senml),
            ),
            1 => {
                let sq = format!("sq={}", 1_000_000 + i);
                rebuild(
                    &reg,
                    mid,
                    &|n, v| {
                        if n != option::URI_QUERY {
                            return Some(v.to_vec());
                        }
                        if v.starts_with(b"sq=") {
                            return Some(sq.clone().into_bytes());
                        }
                        if let Some(ss) = v.strip_prefix(b"ss=") {
                            // One character changed: still base64, no longer the signature.
                            let mut ss = ss.to_vec();
                            ss[3] = if ss[3] == b'A' { b'B' } else { b'A' };
                            return Some([b"ss=".as_slice(), &ss].concat());
                        }
                        Some(v.to_vec())
                    },
                    &[],
                    reg.payload,
                )
            }
            _ => {
                let mut buf = [0u8; 64];
                let mut b =
                    MessageBuilder::new(&mut buf, MessageType::Confirmable, Code::POST, mid, &[1])
                        .unwrap();
                b.uri_path("authz-info").unwrap();
                let n = b.finish();
                let mut d = buf[..n].to_vec();
                d.push(0xff);
                d.extend(forged_token(&audience, &subject, i as u32, wall + 3600));
                d
            }
        }
    };
    let sockets = attackers(&attacking);
    // 256 addresses at 10 a second each: 2,560 forgeries a second.
    let flooder = Flooder::start(clock, sockets, to, Duration::from_millis(100), 3, forge);
    let since = clock.elapsed().as_millis() as u64;
    // A newcomer registers during the flood.
    let n = Node::spawn(n, key, newcomer_at, to, Duration::from_millis(500), clock);
    let newcomer = wait_for(30, || n.registered() && n.acknowledged_since(since) >= 1);
    // The honest device keeps publishing, every reading acknowledged, while the flood goes on.
    let honest = wait_for(30, || v.acknowledged_since(since) >= 10);
    let acknowledged = v.acknowledged_since(since);
    let (forged, secs) = flooder.stop(clock);
    n.stop();
    let deferred = v
        .seen
        .lock()
        .unwrap()
        .events
        .iter()
        .filter(|(t, e)| {
            *t >= since
                && matches!(
                    e,
                    Event::Published {
                        outcome: PublishOutcome::Deferred { .. } | PublishOutcome::Rejected(_),
                        ..
                    }
                )
        })
        .count();
    v.stop();
    eprintln!(
        "{forged} forgeries from {} addresses in {secs:.0} s; honest acknowledged {acknowledged}; counters: {:?}",
        attacking.len(),
        counters(&stats, &["verify.", "authz.", "publish.", "register."])
    );
    let r = VerifyRates::default();
    let bound = [r.proven, r.strangers, r.newcomers]
        .iter()
        .map(|p| allowed(p.total_burst, p.total_per_second, secs))
        .sum::<u64>();
    let failed = stats.get("verify.failed");
    let refused =
        stats.get("verify.refused.host_budget") + stats.get("verify.refused.total_budget");
    assert!(
        refused > 0,
        "forgeries over the budget are refused, counted"
    );
    assert!(
        failed > 0,
        "forgeries within the budget are verified, and fail"
    );
    assert!(
        failed <= bound,
        "failed verifications {failed} within the budget {bound}"
    );
    // Every forgery was either verified (and failed) or refused by the budget or a cheap
    // check: none is verified twice, none passes.
    assert!(failed + refused <= forged as u64);
    assert_eq!(stats.get("authz.accepted"), 0);
    assert!(
        honest,
        "the honest device's readings are acknowledged during the flood ({acknowledged})"
    );
    assert_eq!(deferred, 0, "no honest reading was refused for the budget");
    assert!(
        newcomer,
        "a newcomer registers and publishes during the flood"
    );
    server.shutdown().await;
}
