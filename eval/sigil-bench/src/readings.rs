//! `sigil-bench wire` and `sigil-bench server`: what signed readings cost on the wire and on the server.
//!
//! - `wire`: bytes on the wire for one signed temperature reading in each form, taken from the
//!   datagram the device state machine actually emits, against the IEEE 802.15.4 frame budget.
//! - `server`: end-to-end verified and stored readings per second over loopback UDP with many
//!   concurrent sensors, beside the raw signature-verification rate of the same crypto in the
//!   same run.

use anyhow::{anyhow, Context, Result};
use sigil_client::os::OsRng;
use sigil_client::CoapClient;
use sigil_coap::message::option;
use sigil_coap::{Code, Message, MessageBuilder, MessageType, TransmissionParameters};
use sigil_crypto::{CryptoProvider, RustCrypto, SignatureAlgorithm};
use sigil_device::{Device, DeviceConfig, MemoryStorage};
use sigil_objects::reading::sign_reading;
use sigil_objects::senml::{self, Record, Value};
use sigil_objects::{Freshness, ReadingFormat, SignedReading};
use sigil_time::{Instant, UnixTime};
use std::time::Duration;

/// IEEE 802.15.4 (2006, 2.4 GHz O-QPSK) frame: 127 bytes of PSDU.
pub const PHY_PAYLOAD: usize = 127;
/// MAC header with PAN ID compression and 16-bit short addresses (2 FCF + 1 seq + 2 PAN +
/// 2 dst + 2 src) plus the 2-byte FCS, no link-layer security.
pub const MAC_OVERHEAD: usize = 11;
/// 6LoWPAN IPHC (RFC 6282) for link-local addresses derived from the MAC addresses and a
/// compressed hop limit: 2 bytes. UDP NHC with both ports inline (5683 is outside the
/// 0xF0Bx compressible range): 1 + 4, plus the 2-byte checksum.
pub const LOWPAN_OVERHEAD: usize = 2 + 1 + 4 + 2;

#[derive(Debug, serde::Serialize)]
pub struct WireRow {
    pub form: String,
    pub payload: usize,
    pub coap_message: usize,
    pub budget: usize,
    pub fits_one_frame: bool,
}

fn registered_device(config: DeviceConfig) -> Result<(Device<RustCrypto>, MemoryStorage)> {
    let mut storage = MemoryStorage::default();
    let mut d = Device::boot(RustCrypto, config, &mut storage, &mut OsRng, &[], &[])
        .map_err(|e| anyhow!("{e}"))?;
    d.handle_timeout(Instant::from_millis(0), &mut storage)
        .map_err(|e| anyhow!("{e}"))?;
    let mut buf = [0u8; 2048];
    let n = d.poll_transmit(&mut buf).context("no registration sent")?;
    let req = Message::parse(&buf[..n]).map_err(|e| anyhow!("{e}"))?;
    let mut resp = [0u8; 64];
    let mut b = MessageBuilder::new(
        &mut resp,
        MessageType::Acknowledgement,
        Code::CREATED,
        req.message_id,
        req.token,
    )
    .map_err(|e| anyhow!("{e}"))?;
    b.option(option::LOCATION_PATH, b"rd")
        .map_err(|e| anyhow!("{e}"))?;
    b.option(option::LOCATION_PATH, b"1")
        .map_err(|e| anyhow!("{e}"))?;
    let rn = b.finish();
    d.handle_datagram(Instant::from_millis(1), &mut storage, &resp[..rn])
        .map_err(|e| anyhow!("{e}"))?;
    anyhow::ensure!(d.is_registered());
    Ok((d, storage))
}

/// One temperature reading as the device sends it: (payload bytes, whole CoAP message bytes).
fn device_datagram(config: DeviceConfig, timestamp: Option<UnixTime>) -> Result<(usize, usize)> {
    let (mut d, mut storage) = registered_device(config)?;
    let r = [Record {
        name: Some("t"),
        unit: Some("Cel"),
        value: Some(Value::Number(21.5)),
        ..Default::default()
    }];
    d.publish(Instant::from_millis(2), &mut storage, &r, timestamp)
        .map_err(|e| anyhow!("{e}"))?;
    let mut buf = [0u8; 2048];
    let n = d.poll_transmit(&mut buf).context("no reading sent")?;
    let m = Message::parse(&buf[..n]).map_err(|e| anyhow!("{e}"))?;
    Ok((m.payload.len(), n))
}

pub fn wire() -> Result<Vec<WireRow>> {
    let budget = PHY_PAYLOAD - MAC_OVERHEAD - LOWPAN_OVERHEAD;
    let mut rows = Vec::new();
    let mut push = |form: &str, payload: usize, msg: usize| {
        rows.push(WireRow {
            form: form.into(),
            payload,
            coap_message: msg,
            budget,
            fits_one_frame: msg <= budget,
        });
    };
    let ed = DeviceConfig::default();
    let (p, m) = device_datagram(ed, None)?;
    push("COSE_Sign1 + SenML-CBOR, Ed25519 (default)", p, m);
    let (p, m) = device_datagram(
        DeviceConfig {
            algorithm: SignatureAlgorithm::EcdsaP256,
            ..ed
        },
        None,
    )?;
    push("COSE_Sign1 + SenML-CBOR, ES256", p, m);
    let (p, m) = device_datagram(
        DeviceConfig {
            lsb_bits: Some(8),
            ..ed
        },
        None,
    )?;
    push("COSE_Sign1, Ed25519, 8 low sequence bits", p, m);
    let (p, m) = device_datagram(ed, Some(UnixTime::from_secs(1_700_000_000)))?;
    push("COSE_Sign1, Ed25519, with timestamp", p, m);
    let (p, m) = device_datagram(
        DeviceConfig {
            format: ReadingFormat::Jws,
            ..ed
        },
        None,
    )?;
    push("JWS + SenML-JSON, EdDSA", p, m);
    // Unsigned forms: the same CoAP request carrying the bare SenML pack.
    let r = [Record {
        name: Some("t"),
        unit: Some("Cel"),
        value: Some(Value::Number(21.5)),
        ..Default::default()
    }];
    let (_, signed_msg) = device_datagram(ed, None)?;
    let (signed_payload, _) = device_datagram(ed, None)?;
    let header = signed_msg - signed_payload;
    let mut buf = [0u8; 256];
    let n = senml::encode_cbor(&r, &mut buf)?;
    push("unsigned SenML-CBOR", n, header + n);
    let n = senml::encode_json(&r, &mut buf)?;
    push("unsigned SenML-JSON", n, header + n);
    Ok(rows)
}

pub fn print_wire(rows: &[WireRow]) {
    println!("802.15.4 budget: {PHY_PAYLOAD} B frame - {MAC_OVERHEAD} B MAC (short addresses, PAN ID compression, FCS) - {LOWPAN_OVERHEAD} B 6LoWPAN IPHC+UDP NHC = {} B for the CoAP message", PHY_PAYLOAD - MAC_OVERHEAD - LOWPAN_OVERHEAD);
    println!(
        "{:<46} {:>8} {:>8} {:>6}",
        "form", "payload", "CoAP msg", "fits"
    );
    for r in rows {
        println!(
            "{:<46} {:>8} {:>8} {:>6}",
            r.form,
            r.payload,
            r.coap_message,
            if r.fits_one_frame {
                "yes"
            } else {
                format!("+{}", r.coap_message - r.budget).leak()
            }
        );
    }
}

#[derive(Debug, serde::Serialize)]
pub struct ServerBench {
    /// Server CPU time (user + system, all threads) per acknowledged reading, microseconds.
    pub server_cpu_us_per_reading: f64,
    /// What one core of the server sustains: 1e6 / server_cpu_us_per_reading.
    pub server_readings_per_core_second: f64,
    /// server_readings_per_core_second / raw_verify_per_second_one_thread.
    pub ratio_per_core: f64,
    pub sensors: usize,
    pub readings: usize,
    pub acknowledged: usize,
    pub seconds: f64,
    pub end_to_end_per_second: f64,
    pub raw_verify_per_second_one_thread: f64,
    pub raw_verify_per_second_all_threads: f64,
    pub threads: usize,
    pub ratio_to_raw_all_threads: f64,
}

/// Runs the server in-process, registers `sensors` devices, pre-signs `per_sensor` readings
/// each (so the load generator spends no CPU on signing), then sends them all as Confirmable
/// PUTs, `window` in flight per sensor, and times until every one is acknowledged.
pub async fn server(sensors: usize, per_sensor: usize, quiet: bool) -> Result<ServerBench> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("bench.db");
    // The server runs as its own process so its CPU time can be read apart from the load
    // generator's.
    let port = std::net::UdpSocket::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let child = ServerProcess(
        std::process::Command::new(std::env::current_exe()?)
            .args(["serve", "--listen", &addr.to_string(), "--db"])
            .arg(&db)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()?,
    );
    wait_ready(addr).await?;
    let store = sigil_server::Store::open(&db)?;
    let bar = if quiet {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new((sensors * per_sensor) as u64)
    };
    bar.set_message("signing");
    let mut work: Vec<(String, Vec<Vec<u8>>)> = Vec::new();
    let mut verify_set: Vec<(
        sigil_crypto::PublicKey,
        sigil_identity::Identity,
        u64,
        Vec<u8>,
    )> = Vec::new();
    for _ in 0..sensors {
        // Boot and register for real with the server.
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
        store.add_identity(
            dev.identity(),
            sigil_server::store::IdentityKind::Device,
            "bench",
            sigil_client::os::unix_now().as_secs(),
        )?;
        let mut c = CoapClient::connect(addr, TransmissionParameters::default()).await?;
        dev.handle_timeout(Instant::from_millis(0), &mut storage)
            .map_err(|e| anyhow!("{e}"))?;
        let mut buf = [0u8; 2048];
        let n = dev.poll_transmit(&mut buf).context("registration")?;
        c.send_raw(&buf[..n]).await?;
        let resp = c
            .recv_raw(Duration::from_secs(5))
            .await
            .context("no registration answer")?;
        dev.handle_datagram(Instant::from_millis(1), &mut storage, &resp)
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
        let key = storage.key.clone().context("key")?;
        let pk = RustCrypto.public_key(&key).map_err(|e| anyhow!("{e}"))?;
        let id = *dev.identity();
        let mut signed = Vec::new();
        let first = dev.next_sequence() + 1;
        for i in 0..per_sensor as u64 {
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
                &key,
                &id,
                ReadingFormat::Cose,
                &Freshness {
                    seq: first + i,
                    lsb_bits: None,
                    timestamp: None,
                },
                &sb[..sn],
                &mut scratch,
                &mut out,
            )
            .map_err(|e| anyhow!("{e}"))?;
            signed.push(out[..n].to_vec());
            if i < 50 {
                verify_set.push((pk, id, first + i, out[..n].to_vec()));
            }
        }
        work.push((topic, signed));
    }

    // Raw verification rate of the same crypto over the same kind of readings.
    let verify_all = |set: &[(
        sigil_crypto::PublicKey,
        sigil_identity::Identity,
        u64,
        Vec<u8>,
    )]| {
        for (pk, id, seq, raw) in set {
            let r = SignedReading::parse(ReadingFormat::Cose, raw).expect("own reading parses");
            let mut scratch = vec![0u8; r.scratch_len()];
            r.verify_end_to_end(&RustCrypto, pk, id, *seq, &mut scratch)
                .expect("own reading verifies");
        }
    };
    let reps = 3;
    let t = std::time::Instant::now();
    for _ in 0..reps {
        verify_all(&verify_set);
    }
    let one = (reps * verify_set.len()) as f64 / t.elapsed().as_secs_f64();
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let t = std::time::Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..reps {
                    verify_all(&verify_set)
                }
            });
        }
    });
    let all = (threads * reps * verify_set.len()) as f64 / t.elapsed().as_secs_f64();

    bar.set_message("publishing");
    let cpu_before = process_cpu_seconds(child.0.id())?;
    let acked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let start = std::time::Instant::now();
    let mut tasks = Vec::new();
    for (topic, readings) in work {
        let acked = acked.clone();
        let bar = bar.clone();
        tasks.push(tokio::spawn(async move {
            let mut c = CoapClient::connect(addr, TransmissionParameters::default()).await?;
            for raw in readings {
                let spec = sigil_client::RequestSpec {
                    path: &topic,
                    content_format: Some(18),
                    payload: &raw,
                    ..Default::default()
                };
                let r = c.request(Code::PUT, &spec).await?;
                if r.code == Code::CHANGED {
                    acked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    bar.inc(1);
                }
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let seconds = start.elapsed().as_secs_f64();
    let server_cpu = process_cpu_seconds(child.0.id())? - cpu_before;
    bar.finish_and_clear();
    drop(child);
    let acknowledged = acked.load(std::sync::atomic::Ordering::Relaxed);
    let rate = acknowledged as f64 / seconds;
    let cpu_us = server_cpu * 1e6 / acknowledged.max(1) as f64;
    Ok(ServerBench {
        server_cpu_us_per_reading: cpu_us,
        server_readings_per_core_second: 1e6 / cpu_us,
        ratio_per_core: (1e6 / cpu_us) / one,
        sensors,
        readings: sensors * per_sensor,
        acknowledged,
        seconds,
        end_to_end_per_second: rate,
        raw_verify_per_second_one_thread: one,
        raw_verify_per_second_all_threads: all,
        threads,
        ratio_to_raw_all_threads: rate / all,
    })
}

/// Kills the server process when dropped.
struct ServerProcess(std::process::Child);

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// User + system CPU seconds of a process and all its threads, from /proc (USER_HZ = 100).
fn process_cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .context("reading /proc (Linux only)")?;
    // Fields after the command name (which is in parentheses and may contain spaces).
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
async fn wait_ready(addr: std::net::SocketAddr) -> Result<()> {
    let mut c = CoapClient::connect(addr, TransmissionParameters::default()).await?;
    for _ in 0..200 {
        c.send_raw(&[0x40, 0x00, 0x00, 0x01]).await?;
        if c.recv_raw(Duration::from_millis(100)).await.is_some() {
            return Ok(());
        }
    }
    anyhow::bail!("bench server did not start")
}
