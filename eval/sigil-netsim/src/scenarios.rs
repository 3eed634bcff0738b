//! Application workloads through the emulator: a CoAP echo (plain and inside DTLS), and a
//! sleepy sensor publishing readings, either signed end to end (the real `sigil-device` state
//! machine talking to the real `sigil-server` dispatcher, SQLite and all) or unsigned inside a
//! DTLS session.

use crate::dtls::Secure;
use crate::energy::{Activity, CycleTable, Metered};
use crate::net::{Emulator, End, LinkConfig};
use crate::SeededRng;
use sigil_coap::{Code, Message, MessageBuilder, MessageType};
use sigil_device::{Device, DeviceConfig, Event, MemoryStorage, PublishOutcome};
use sigil_objects::senml::{self, Record, Value};
use sigil_server::store::IdentityKind;
use sigil_server::{Dispatcher, ServerConfig, Stats, Store};
use std::net::SocketAddr;

/// A CoAP CON POST /e carrying `payload`.
pub fn echo_request(mid: u16, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; payload.len() + 32];
    let mut b = MessageBuilder::new(&mut buf, MessageType::Confirmable, Code::POST, mid, &[0x42])
        .expect("buffer fits");
    b.uri_path("e").expect("buffer fits");
    let n = b.finish_with_payload(payload).expect("buffer fits");
    buf.truncate(n);
    buf
}

/// The server's side of the echo: a piggybacked 2.04 ACK with the request's payload.
pub fn echo_response(request: &[u8]) -> Vec<u8> {
    let Ok(m) = Message::parse(request) else {
        return vec![];
    };
    let mut buf = vec![0u8; m.payload.len() + 32];
    let b = MessageBuilder::new(
        &mut buf,
        MessageType::Acknowledgement,
        Code::CHANGED,
        m.message_id,
        m.token,
    )
    .expect("buffer fits");
    let n = b.finish_with_payload(m.payload).expect("buffer fits");
    buf.truncate(n);
    buf
}

/// Round-trip time of one plain CoAP echo of `payload_len` bytes, in µs (`None` if lost).
pub fn plain_echo_rtt(emu: &mut Emulator, payload_len: usize) -> Option<u64> {
    let start = emu.now_us();
    emu.send(End::Device, &echo_request(1, &vec![0x5a; payload_len]));
    while let Some(t) = emu.next_arrival_us() {
        for (to, d) in emu.advance(t) {
            match to {
                End::Server => {
                    emu.send(End::Server, &echo_response(&d));
                }
                End::Device => {
                    let m = Message::parse(&d).ok()?;
                    assert_eq!(m.payload.len(), payload_len);
                    return Some(emu.now_us() - start);
                }
            }
        }
    }
    None
}

/// Round-trip time of the same echo inside an established DTLS session, in µs.
pub fn dtls_echo_rtt(s: &mut Secure, payload_len: usize) -> Option<u64> {
    let (rtt, answer) = s.exchange(&echo_request(1, &vec![0x5a; payload_len]), echo_response)?;
    let m = Message::parse(&answer).ok()?;
    (m.payload.len() == payload_len).then_some(rtt)
}

/// What one reading cost the device, averaged over a run.
#[derive(Clone, Debug, Default)]
pub struct PerReading {
    pub readings: u64,
    pub acknowledged: u64,
    /// Device activity over the readings (registration excluded), sleep included.
    pub activity: Activity,
    /// UDP payload bytes the device sent per reading.
    pub udp_bytes_up: f64,
    /// Publish to acknowledgement, median, ms.
    pub latency_ms: f64,
}

impl PerReading {
    pub fn per_reading(&self) -> Activity {
        let n = self.readings.max(1);
        let a = &self.activity;
        Activity {
            cpu_cycles: a.cpu_cycles / n,
            tx_us: a.tx_us / n,
            rx_us: a.rx_us / n,
            listen_us: a.listen_us / n,
            sleep_us: a.sleep_us / n,
            frames_tx: a.frames_tx / n,
            frames_rx: a.frames_rx / n,
            bytes_tx: a.bytes_tx / n,
            bytes_rx: a.bytes_rx / n,
        }
    }
}

/// The sensor's i-th reading: one temperature record.
pub(crate) fn reading(i: u64) -> [Record<'static>; 1] {
    [Record {
        name: Some("t"),
        unit: Some("Cel"),
        value: Some(Value::Number(20.0 + i as f64 / 10.0)),
        ..Default::default()
    }]
}

/// The i-th reading as SenML-CBOR (unsigned: for schemes that protect it otherwise).
pub(crate) fn reading_cbor(i: u64) -> Vec<u8> {
    let mut buf = [0u8; 64];
    let len = senml::encode_cbor(&reading(i), &mut buf).expect("one record fits");
    buf[..len].to_vec()
}

/// What the device did between two snapshots of its activity.
pub(crate) fn delta(after: &Activity, before: &Activity) -> Activity {
    Activity {
        cpu_cycles: after.cpu_cycles - before.cpu_cycles,
        tx_us: after.tx_us - before.tx_us,
        rx_us: after.rx_us - before.rx_us,
        listen_us: after.listen_us.saturating_sub(before.listen_us),
        sleep_us: after.sleep_us.saturating_sub(before.sleep_us),
        frames_tx: after.frames_tx - before.frames_tx,
        frames_rx: after.frames_rx - before.frames_rx,
        bytes_tx: after.bytes_tx - before.bytes_tx,
        bytes_rx: after.bytes_rx - before.bytes_rx,
    }
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

const NOW_UNIX: i64 = 1_800_000_000;

/// `n` signed readings from a real device, one every `every_ms`, sleeping in between, to the
/// real server (RD + broker on SQLite in a temporary directory). Registration happens first
/// and is not counted.
pub fn signed_readings(
    link: LinkConfig,
    table: CycleTable,
    n: u64,
    every_ms: u64,
    seed: u64,
) -> PerReading {
    let dir = tempfile::tempdir().expect("temporary directory");
    let db = dir.path().join("netsim.db");
    let stats = Stats::default();
    let addr: SocketAddr = "[fe80::ff:fe00:1]:5683".parse().expect("address");
    let config = ServerConfig::new(addr, db.clone());
    let store = Store::open(&db).expect("store");
    let service =
        sigil_server::Service::new(store, config.service.clone(), stats.clone()).expect("service");
    let mut echo_secret = [0u8; 32];
    sigil_crypto::Rng::fill(&mut SeededRng(seed ^ 0x6563_686f), &mut echo_secret).expect("seeded");
    let mut server = Dispatcher::new(config, service, stats, echo_secret);

    let meter = Metered::new(table);
    let mut storage = MemoryStorage::default();
    let mut device = Device::boot(
        meter.clone(),
        DeviceConfig {
            // A sleepy sensor's registration must outlive its sleep: the device refreshes at
            // 80% of the lifetime, so at least one wake must fall in the last 20%.
            lifetime: std::time::Duration::from_millis(every_ms * 10)
                .max(std::time::Duration::from_secs(300)),
            ..DeviceConfig::default()
        },
        &mut storage,
        &mut SeededRng(seed),
        &[],
        &[],
    )
    .expect("device boots");
    Store::open(&db)
        .expect("store")
        .add_identity(device.identity(), IdentityKind::Device, "", NOW_UNIX)
        .expect("provisioned");
    let mut emu = Emulator::new(link, seed);
    let mut charged = meter.cycles(); // first boot's key generation is not a reading's cost
    let mut buf = vec![0u8; 2048];
    let mut events = vec![];
    // Runs device and server until `until_us` or until `stop` says so.
    let mut run = |emu: &mut Emulator,
                   device: &mut Device<Metered>,
                   storage: &mut MemoryStorage,
                   events: &mut Vec<Event>,
                   until_us: u64,
                   stop: &dyn Fn(&[Event]) -> bool| {
        loop {
            emu.compute(End::Device, meter.cycles() - charged);
            charged = meter.cycles();
            while let Some(k) = device.poll_transmit(&mut buf) {
                emu.send(End::Device, &buf[..k]);
            }
            while let Some(e) = device.poll_event() {
                events.push(e);
            }
            // Done when `stop` holds and the device has nothing outstanding: no frame in
            // flight and no retransmission due soon (its next timer is a periodic one).
            let quiet = emu.next_arrival_us().is_none()
                && device
                    .poll_timeout()
                    .is_none_or(|t| t.as_millis() * 1000 > emu.now_us() + 10_000_000);
            if stop(events) && quiet {
                return;
            }
            let next = [
                emu.next_arrival_us(),
                device.poll_timeout().map(|t| t.as_millis() * 1000),
            ]
            .into_iter()
            .flatten()
            .min();
            let Some(next) = next.filter(|&t| t <= until_us) else {
                emu.advance(until_us);
                return;
            };
            let arrived = emu.advance(next.max(emu.now_us()));
            let now_ms = emu.now_ms();
            let _ = device.handle_timeout(emu.instant(), storage);
            for (to, d) in arrived {
                if to == End::Device {
                    let _ = device.handle_datagram(emu.instant(), storage, &d);
                    continue;
                }
                let now_s = NOW_UNIX + (now_ms / 1000) as i64;
                for (_, reply) in server.handle_at(
                    vec![(addr, d)],
                    sigil_time::Instant::from_millis(now_ms),
                    sigil_time::UnixTime::from_secs(now_s),
                ) {
                    emu.send(End::Server, &reply);
                }
            }
        }
    };
    run(
        &mut emu,
        &mut device,
        &mut storage,
        &mut events,
        600_000_000,
        &|e| e.contains(&Event::Registered),
    );
    assert!(
        events.contains(&Event::Registered),
        "registration failed: {events:?}"
    );
    emu.sleep();
    let start = emu.device_activity();
    let udp_start = emu.stats.udp_bytes_from_device;
    let mut out = PerReading::default();
    let mut latencies = vec![];
    let t0 = emu.now_us().div_ceil(1_000_000) * 1_000_000 + every_ms * 1000;
    for i in 0..n {
        emu.advance(t0 + i * every_ms * 1000);
        emu.wake();
        let r = reading(i);
        // Waking, the firmware first serves the timers that came due while it slept (a
        // registration refresh), and publishes once that exchange is done.
        let _ = device.handle_timeout(emu.instant(), &mut storage);
        if !device.can_publish() {
            let until = emu.now_us() + every_ms * 500;
            run(
                &mut emu,
                &mut device,
                &mut storage,
                &mut events,
                until,
                &|_| true,
            );
        }
        let published_at = emu.now_us();
        let seq = device
            .publish(emu.instant(), &mut storage, &r, None)
            .expect("publish");
        events.clear();
        let acked = move |e: &[Event]| {
            e.iter()
                .any(|e| matches!(e, Event::Published { seq: s, .. } if *s == seq))
        };
        let deadline = published_at + every_ms * 1000 - 1;
        run(
            &mut emu,
            &mut device,
            &mut storage,
            &mut events,
            deadline,
            &acked,
        );
        out.readings += 1;
        if events.iter().any(|e| {
            matches!(e, Event::Published { seq: s, outcome: PublishOutcome::Acknowledged } if *s == seq)
        }) {
            out.acknowledged += 1;
            latencies.push((emu.cpu_free_at_us(End::Device) - published_at) as f64 / 1000.0);
        }
        emu.sleep();
    }
    emu.advance(t0 + n * every_ms * 1000);
    out.activity = delta(&emu.device_activity(), &start);
    out.udp_bytes_up = (emu.stats.udp_bytes_from_device - udp_start) as f64 / n as f64;
    out.latency_ms = median(&mut latencies);
    out
}

/// The same sensor's reading as unsigned SenML-CBOR in a CoAP CON, one record of an
/// established DTLS session, acknowledged by the server inside the session.
pub fn dtls_readings(s: &mut Secure, n: u64, every_ms: u64) -> PerReading {
    s.emu.sleep();
    let start = s.emu.device_activity();
    let udp_start = s.emu.stats.udp_bytes_from_device;
    let mut out = PerReading::default();
    let mut latencies = vec![];
    let t0 = s.emu.now_us().div_ceil(1_000_000) * 1_000_000 + every_ms * 1000;
    for i in 0..n {
        s.emu.advance(t0 + i * every_ms * 1000);
        s.emu.wake();
        let request = echo_request(i as u16, &reading_cbor(i));
        out.readings += 1;
        if let Some((rtt, _)) = s.exchange(&request, |req| {
            let m = Message::parse(req).expect("own request");
            sigil_coap::message::empty(MessageType::Acknowledgement, m.message_id).to_vec()
        }) {
            out.acknowledged += 1;
            latencies.push(rtt as f64 / 1000.0);
        }
        s.emu.sleep();
    }
    s.emu.advance(t0 + n * every_ms * 1000);
    out.activity = delta(&s.emu.device_activity(), &start);
    out.udp_bytes_up = (s.emu.stats.udp_bytes_from_device - udp_start) as f64 / n as f64;
    out.latency_ms = median(&mut latencies);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtls::{handshake, Suite, Timers};
    use crate::energy::CORTEX_M4_PORTABLE;

    #[test]
    fn a_dtls_echo_takes_longer_than_a_plain_one_and_jumps_at_frame_boundaries() {
        let link = LinkConfig::default();
        let (_, s) = handshake(link, CORTEX_M4_PORTABLE, Suite::Psk, 1024, Timers::SEED, 1);
        let mut s = s.unwrap();
        let mut e = Emulator::new(link, 1);
        let p16 = plain_echo_rtt(&mut e, 16).unwrap();
        let d16 = dtls_echo_rtt(&mut s, 16).unwrap();
        assert!(d16 > p16);
        // 107 bytes of UDP payload fit one frame: the request has 8 bytes of CoAP before its payload.
        let p99 = plain_echo_rtt(&mut e, 99).unwrap();
        let p100 = plain_echo_rtt(&mut e, 100).unwrap();
        assert!(p100 - p99 > 27_368, "{p99} {p100}");
    }

    #[test]
    fn a_sleepy_signed_sensor_gets_every_reading_acknowledged() {
        let r = signed_readings(LinkConfig::default(), CORTEX_M4_PORTABLE, 5, 60_000, 1);
        assert_eq!(r.acknowledged, 5);
        let per = r.per_reading();
        // A 131-byte signed reading does not fit one frame's 107 bytes: two frames up, one
        // ACK down per reading (the registration, lifetime 600 s, is not due for refresh).
        assert_eq!(r.activity.frames_tx, 5 * 2, "{:?}", r.activity);
        assert_eq!(r.activity.frames_rx, 5, "{:?}", r.activity);
        // 131 bytes with a value that fits a half float; 20.1 and the like take a double.
        assert!(
            r.udp_bytes_up >= 131.0 && r.udp_bytes_up <= 137.0,
            "{}",
            r.udp_bytes_up
        );
        assert!(per.cpu_cycles >= 4_155_395, "{}", per.cpu_cycles);
        assert!(per.sleep_us > 59_000_000);
    }

    #[test]
    fn dtls_readings_are_smaller_and_cheaper_to_compute_than_signed_ones() {
        let link = LinkConfig::default();
        let (_, s) = handshake(link, CORTEX_M4_PORTABLE, Suite::Psk, 1024, Timers::SEED, 1);
        let r = dtls_readings(&mut s.unwrap(), 5, 60_000);
        assert_eq!(r.acknowledged, 5);
        let per = r.per_reading();
        assert_eq!(per.frames_tx, 1);
        assert!(per.cpu_cycles < 200_000, "{}", per.cpu_cycles);
    }
}
