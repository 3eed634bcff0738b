//! `sigil sensor`: the device state machine driven over a real UDP socket, with synthetic
//! temperature and humidity. The machine is the signing device (`sigil_device::Device`) or a
//! node with only a pre-shared key (`sigil_device::PskNode`); [`Machine`] is what the loop
//! needs of either.

use crate::util::since;
use anyhow::{anyhow, Result};
use sigil_client::os::unix_now;
use sigil_client::transport::{Security, Transport};
use sigil_crypto::RustCrypto;
use sigil_device::{Device, DeviceError, DeviceStorage, Event, PskEvent, PskNode, PublishOutcome};
use sigil_objects::senml::{Record, Value};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// What one sensor did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct SensorReport {
    pub identity: String,
    /// Sequence numbers the broker acknowledged (2.04 to a Confirmable reading).
    pub acknowledged: Vec<u64>,
    /// Non-confirmable readings sent (no acknowledgement expected).
    pub sent_non_confirmable: u64,
    pub rejected: Vec<(u64, String)>,
    pub timed_out: Vec<u64>,
    pub resyncs: u64,
    /// Readings refused with 4.04 or 4.15 that the device published again after registering
    /// anew (each settles under its new number).
    pub republished: u64,
    /// Readings the broker answered 5.03 (it could not store them then), kept and published
    /// again after the answer's Max-Age.
    pub deferred: u64,
    /// 1 if the sensor was stopped while a deferred reading still waited to be sent again
    /// (more than `STOP_GRACE` ahead): that reading was not stored.
    pub not_stored_at_stop: u64,
    pub registrations: u64,
    pub registration_failures: Vec<String>,
    pub retransmissions: u32,
    /// Whether the sensor required signed answers (coap:// with a trusted server).
    pub signed_answers: bool,
    /// Answers not acted on for want of a valid signature from the trusted server (unsigned,
    /// badly signed, bare Resets), with signed answers required.
    pub answers_refused: u32,
    /// DTLS handshakes completed (coaps:// only): 1, plus one per reconnect.
    pub dtls_handshakes: u32,
    /// Of those, abbreviated handshakes that resumed the previous session.
    pub dtls_resumed: u32,
    /// Sessions taken up from the association kept in the state directory, without a
    /// handshake (0 or 1).
    pub dtls_restored: u32,
    /// Writes of the kept association file (one per handshake or restore, then one per
    /// `ASSOCIATION_RESERVE_AHEAD` records).
    pub dtls_association_writes: u64,
}

#[derive(Clone, Debug)]
pub struct SensorRun {
    pub server: SocketAddr,
    pub interval: Duration,
    /// Stop after this many readings (None: until stopped).
    pub readings: Option<u64>,
    /// Phase of the synthetic signal, so sensors differ.
    pub phase: f64,
    /// coaps:// credentials, or plain CoAP.
    pub security: Security,
    pub dtls: sigil_dtls::Config,
    /// coaps://: keep the established association in this file, MACed under this key, and
    /// take it up at start instead of a handshake.
    pub association: Option<(std::path::PathBuf, [u8; 32])>,
    /// How its DTLS handshakes travel.
    pub carrier: sigil_client::Carrier,
    /// With `--serve`: the readings as they leave and the server key its handshakes
    /// authenticate, for the serving side (crate::serve).
    pub tap: Option<crate::serve::Tap>,
}

/// What the sensor loop drives: the sans-IO machine of a signing device or of a PSK-only node.
pub trait Machine<S: DeviceStorage> {
    fn identity(&self) -> &sigil_identity::Identity;
    fn handle_timeout(
        &mut self,
        now: sigil_time::Instant,
        storage: &mut S,
    ) -> Result<(), DeviceError>;
    fn can_publish(&self) -> bool;
    fn is_registered(&self) -> bool;
    fn has_pending_republication(&self) -> bool;
    fn publish(
        &mut self,
        now: sigil_time::Instant,
        storage: &mut S,
        records: &[Record<'_>],
        timestamp: Option<sigil_time::UnixTime>,
    ) -> Result<(), DeviceError>;
    fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<usize>;
    /// The next event, in the signing device's terms.
    fn poll_event(&mut self) -> Option<Event>;
    fn poll_timeout(&self) -> Option<sigil_time::Instant>;
    fn handle_datagram(
        &mut self,
        now: sigil_time::Instant,
        storage: &mut S,
        datagram: &[u8],
    ) -> Result<(), DeviceError>;
    fn retransmissions(&self) -> u32;
    /// Whether signed answers are required, and how many answers were refused for it.
    fn signed_answers(&self) -> (bool, u32) {
        (false, 0)
    }
}

impl<S: DeviceStorage> Machine<S> for Device<RustCrypto> {
    fn identity(&self) -> &sigil_identity::Identity {
        Device::identity(self)
    }
    fn handle_timeout(
        &mut self,
        now: sigil_time::Instant,
        storage: &mut S,
    ) -> Result<(), DeviceError> {
        Device::handle_timeout(self, now, storage)
    }
    fn can_publish(&self) -> bool {
        Device::can_publish(self)
    }
    fn is_registered(&self) -> bool {
        Device::is_registered(self)
    }
    fn has_pending_republication(&self) -> bool {
        Device::has_pending_republication(self)
    }
    fn publish(
        &mut self,
        now: sigil_time::Instant,
        storage: &mut S,
        records: &[Record<'_>],
        timestamp: Option<sigil_time::UnixTime>,
    ) -> Result<(), DeviceError> {
        Device::publish(self, now, storage, records, timestamp).map(|_| ())
    }
    fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<usize> {
        Device::poll_transmit(self, buf)
    }
    fn poll_event(&mut self) -> Option<Event> {
        Device::poll_event(self)
    }
    fn poll_timeout(&self) -> Option<sigil_time::Instant> {
        Device::poll_timeout(self)
    }
    fn handle_datagram(
        &mut self,
        now: sigil_time::Instant,
        storage: &mut S,
        datagram: &[u8],
    ) -> Result<(), DeviceError> {
        Device::handle_datagram(self, now, storage, datagram)
    }
    fn retransmissions(&self) -> u32 {
        self.stats.retransmissions
    }
    fn signed_answers(&self) -> (bool, u32) {
        let s = &self.stats;
        (
            self.requires_signed_answers(),
            s.unsigned_answers
                .saturating_add(s.bad_answer_signatures)
                .saturating_add(s.resets_refused),
        )
    }
}

/// A PSK-only node in the loop. In session mode its readings carry no number; the report
/// numbers them in the order they were published, as the broker does.
pub struct PskSensor {
    pub node: PskNode<RustCrypto>,
    published: u64,
}

impl PskSensor {
    pub fn new(node: PskNode<RustCrypto>) -> Self {
        Self { node, published: 0 }
    }
}

impl<S: DeviceStorage> Machine<S> for PskSensor {
    fn identity(&self) -> &sigil_identity::Identity {
        self.node.identity()
    }
    fn handle_timeout(
        &mut self,
        now: sigil_time::Instant,
        storage: &mut S,
    ) -> Result<(), DeviceError> {
        self.node.handle_timeout(now, storage)
    }
    fn can_publish(&self) -> bool {
        self.node.can_publish()
    }
    fn is_registered(&self) -> bool {
        self.node.is_registered()
    }
    fn has_pending_republication(&self) -> bool {
        self.node.has_pending_republication()
    }
    fn publish(
        &mut self,
        now: sigil_time::Instant,
        storage: &mut S,
        records: &[Record<'_>],
        timestamp: Option<sigil_time::UnixTime>,
    ) -> Result<(), DeviceError> {
        self.node.publish(now, storage, records, timestamp)?;
        Ok(())
    }
    fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<usize> {
        self.node.poll_transmit(buf)
    }
    fn poll_event(&mut self) -> Option<Event> {
        Some(match self.node.poll_event()? {
            PskEvent::Registered => Event::Registered,
            PskEvent::RegistrationRefreshed => Event::RegistrationRefreshed,
            PskEvent::RegistrationFailed { code } => Event::RegistrationFailed { code },
            PskEvent::Resynchronising => Event::Resynchronising,
            PskEvent::Published { seq, outcome } => Event::Published {
                seq: seq.unwrap_or_else(|| {
                    self.published += 1;
                    self.published
                }),
                outcome,
            },
        })
    }
    fn poll_timeout(&self) -> Option<sigil_time::Instant> {
        self.node.poll_timeout()
    }
    fn handle_datagram(
        &mut self,
        now: sigil_time::Instant,
        storage: &mut S,
        datagram: &[u8],
    ) -> Result<(), DeviceError> {
        self.node.handle_datagram(now, storage, datagram)
    }
    fn retransmissions(&self) -> u32 {
        self.node.stats.retransmissions
    }
}

/// Synthetic readings quantised like a real sensor (1/16 °C as a DS18B20, 1/8 %RH), which
/// also keeps them exact in half-precision floats.
pub fn synthetic(t: f64, phase: f64) -> (f64, f64) {
    let temp = 21.0 + 3.0 * ((t / 60.0) + phase).sin();
    let hum = 45.0 + 10.0 * ((t / 90.0) + 2.0 * phase).cos();
    ((temp * 16.0).round() / 16.0, (hum * 8.0).round() / 8.0)
}

/// Runs the device until `readings` have been published and settled, or `stop` turns true.
/// `on_event` sees every device event (for progress bars).
pub async fn run<S: DeviceStorage, M: Machine<S>>(
    mut device: M,
    mut storage: S,
    run: SensorRun,
    mut stop: watch::Receiver<bool>,
    mut on_event: impl FnMut(&Event),
) -> Result<SensorReport> {
    let mut transport = Transport::bind(run.server, run.security.clone(), run.dtls).await?;
    transport.set_carrier(run.carrier);
    if let (true, Some((path, key))) = (transport.is_secure(), run.association.clone()) {
        transport.keep_association(path, key);
    }
    let start = Instant::now();
    let mut report = SensorReport {
        identity: device.identity().to_string(),
        ..Default::default()
    };
    // Refusals are printed at the default log level, with the reason and the fix.
    let mut refusals = crate::refusals::Refusals::new(report.identity.clone(), run.server);
    if transport.is_secure() && !transport.restore() && !connect(&mut transport, &mut stop).await {
        // Stopped before the first session: nothing was published.
        return Ok(report);
    }
    tap_server_key(&run, &transport);
    let mut buf = vec![0u8; 2048];
    let mut reconnect = false;
    // Failed reconnect handshakes in a row, and when the next may start (back-off).
    let mut reconnect_failures = 0u32;
    let mut reconnect_after = Instant::now();
    let mut reconnect_logged: Option<String> = None;
    // Retransmissions since the server last said anything: over DTLS, two in a row mean the
    // session is probably gone (the server restarted), so the sensor handshakes again.
    let mut retx_seen = 0u32;
    let mut next_reading = sigil_time::Instant::ZERO;
    let mut published = 0u64;
    let mut settled = 0u64;
    // When the stop was asked for, plus STOP_GRACE.
    let mut stop_deadline: Option<sigil_time::Instant> = None;
    loop {
        let now = since(start);
        device
            .handle_timeout(now, &mut storage)
            .map_err(|e| anyhow!("device: {e}"))?;
        let want_more = run.readings.is_none_or(|n| published < n) && !*stop.borrow();
        if want_more && device.can_publish() && now >= next_reading {
            let (temp, hum) = synthetic(now.as_millis() as f64 / 1000.0, run.phase);
            let records = [
                Record {
                    name: Some("t"),
                    unit: Some("Cel"),
                    value: Some(Value::Number(temp)),
                    ..Default::default()
                },
                Record {
                    name: Some("h"),
                    unit: Some("%RH"),
                    value: Some(Value::Number(hum)),
                    ..Default::default()
                },
            ];
            device
                .publish(now, &mut storage, &records, Some(unix_now()))
                .map_err(|e| anyhow!("publish: {e}"))?;
            published += 1;
            next_reading = now + run.interval;
        }
        if transport.is_secure() && device.retransmissions() >= retx_seen + 2 {
            retx_seen = device.retransmissions();
            reconnect = true;
        }
        if reconnect && Instant::now() >= reconnect_after && !*stop.borrow() {
            // The server lost or ended the DTLS session (restart, eviction, fatal alert): a
            // new handshake; a failed one is tried again after an exponential back-off, while
            // the device's own timers keep running.
            reconnect = false;
            let result = tokio::select! {
                r = transport.handshake() => Some(r),
                _ = stop_requested(&mut stop) => None,
            };
            match result {
                Some(Ok(())) => {
                    reconnect_failures = 0;
                    tap_server_key(&run, &transport);
                }
                Some(Err(e)) => {
                    let delay = backoff(reconnect_failures, jitter());
                    reconnect_failures = reconnect_failures.saturating_add(1);
                    reconnect_after = Instant::now() + delay;
                    reconnect = true;
                    if should_report(reconnect_failures, &e, &mut reconnect_logged) {
                        eprintln!(
                            "sensor: DTLS reconnect failed ({e:#}); {}",
                            next_try(delay, reconnect_failures)
                        );
                    }
                }
                None => {}
            }
        }
        while let Some(n) = device.poll_transmit(&mut buf) {
            if let Some(tap) = &run.tap {
                tap.outgoing(&buf[..n]);
            }
            if let Err(e) = transport.send(&buf[..n]).await {
                tracing::debug!(error = %e, "send failed");
                reconnect = transport.is_secure();
            }
        }
        while let Some(ev) = device.poll_event() {
            on_event(&ev);
            refusals.on_event(&ev);
            match ev {
                Event::Published { seq, outcome } => {
                    match outcome {
                        PublishOutcome::Acknowledged => report.acknowledged.push(seq),
                        PublishOutcome::Sent => report.sent_non_confirmable += 1,
                        PublishOutcome::Rejected(c) => report.rejected.push((seq, c.to_string())),
                        PublishOutcome::TimedOut => {
                            report.timed_out.push(seq);
                            reconnect = transport.is_secure();
                        }
                        // Published again under a new number once re-registered.
                        PublishOutcome::Reset => continue,
                        PublishOutcome::Republishing(_) => {
                            report.republished += 1;
                            continue;
                        }
                        // The broker could not store it now: published again after Max-Age.
                        PublishOutcome::Deferred {
                            code,
                            retry_after_secs,
                        } => {
                            report.deferred += 1;
                            tracing::warn!(
                                seq,
                                code = %code,
                                retry_after_secs,
                                "the broker could not store reading {seq} ({code}); kept, and published again in {retry_after_secs} s"
                            );
                            continue;
                        }
                    }
                    settled += 1;
                }
                Event::Resynchronising => report.resyncs += 1,
                Event::Registered => report.registrations += 1,
                Event::RegistrationFailed { code } => {
                    report.registration_failures.push(code.to_string())
                }
                Event::RegistrationRefreshed => {}
            }
        }
        let stopped = *stop.borrow();
        if stopped && stop_deadline.is_none() {
            stop_deadline = Some(now + STOP_GRACE);
        }
        // Stopped while the broker holds back a reading (5.xx): if it is due again within
        // STOP_GRACE of the stop, it is sent before the sensor stops; otherwise the sensor
        // stops and says so.
        let pending_soon = device.has_pending_republication()
            && device.is_registered()
            && stop_deadline.is_some_and(|d| device.poll_timeout().is_some_and(|t| t <= d));
        let finished = run.readings.is_some_and(|n| published >= n && settled >= n)
            || (stopped
                && !pending_soon
                && (device.can_publish()
                    || !device.is_registered()
                    || device.has_pending_republication()));
        if finished {
            if stopped && device.has_pending_republication() {
                report.not_stored_at_stop = 1;
                eprintln!("sensor: stopped with a reading the broker has not stored (it answered 5.xx and asked for a later try); that reading is not sent again");
            }
            break;
        }
        let mut wake = device
            .poll_timeout()
            .unwrap_or(now + Duration::from_secs(1));
        if want_more && device.can_publish() {
            wake = wake.min(next_reading);
        }
        let mut sleep = wake.saturating_since(now).max(Duration::from_millis(1));
        if reconnect {
            sleep = sleep.min(
                reconnect_after
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(1)),
            );
        }
        tokio::select! {
            r = transport.recv() => {
                match r {
                    Ok(m) => {
                        refusals.saw_answer(&m);
                        retx_seen = device.retransmissions();
                        let now = since(start);
                        let unsigned_before = device.signed_answers().1;
                        device.handle_datagram(now, &mut storage, &m).map_err(|e| anyhow!("device: {e}"))?;
                        if device.signed_answers().1 > unsigned_before {
                            refusals.not_acted_on();
                        }
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "receive failed");
                        reconnect = transport.is_secure();
                    }
                }
            }
            _ = tokio::time::sleep(sleep) => {}
            _ = stop.changed(), if !stopped => {}
        }
    }
    if run.association.is_some() && transport.is_secure() {
        // A clean stop keeps the association: its file already reserves every record sealed,
        // and the server keeps the session, so the next start takes it up without a
        // handshake. No close_notify, which would end it on the server.
        tracing::info!("DTLS association kept for the next start");
    } else {
        transport.close().await;
    }
    report.retransmissions = device.retransmissions();
    (report.signed_answers, report.answers_refused) = device.signed_answers();
    report.dtls_handshakes = transport.handshakes;
    report.dtls_resumed = transport.resumed;
    report.dtls_restored = transport.restored;
    report.dtls_association_writes = transport.association_writes;
    Ok(report)
}

fn tap_server_key(run: &SensorRun, transport: &Transport) {
    if let (Some(tap), Some(key)) = (&run.tap, transport.peer_public_key()) {
        tap.learned_server_key(key);
    }
}

/// How long a stopped sensor waits for a deferred reading's next try before it stops anyway.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// First delay between failed DTLS handshakes; it doubles up to [`BACKOFF_CAP`].
pub const BACKOFF_FIRST: Duration = Duration::from_secs(1);
/// Longest delay between DTLS handshake attempts.
pub const BACKOFF_CAP: Duration = Duration::from_secs(60);
/// Whether failure number `failures` (1-based) of a handshake is printed: a new error is,
/// and the same one again at failures 2, 4, 8, … (once per back-off step while the delay
/// grows, then ever more rarely), never every time identically.
fn should_report(failures: u32, e: &anyhow::Error, last: &mut Option<String>) -> bool {
    let text = format!("{e:#}");
    if last.as_deref() != Some(text.as_str()) {
        *last = Some(text);
        return true;
    }
    failures.is_power_of_two()
}

/// "retrying at 14:02:07 UTC (in 4.1 s; failure 3, the same failure is printed again at 4)".
fn next_try(delay: Duration, failures: u32) -> String {
    let at = std::time::SystemTime::now() + delay;
    let secs = at
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (h, m, s) = ((secs / 3600) % 24, (secs / 60) % 60, secs % 60);
    format!(
        "retrying at {h:02}:{m:02}:{s:02} UTC (in {:.1} s; failure {failures}, the same failure is printed again at failure {})",
        delay.as_secs_f64(),
        failures.saturating_add(1).next_power_of_two()
    )
}

/// The delay before handshake attempt `attempt + 1` (0-based count of failures so far):
/// `BACKOFF_FIRST * 2^attempt`, capped at [`BACKOFF_CAP`], then scaled by `jitter` (0.0 to
/// 1.0) to between 75 % and 125 % of that, so that sensors restarted together spread out.
pub fn backoff(attempt: u32, jitter: f64) -> Duration {
    let base = BACKOFF_FIRST
        .saturating_mul(1u32 << attempt.min(16))
        .min(BACKOFF_CAP);
    let jitter = if jitter.is_finite() {
        jitter.clamp(0.0, 1.0)
    } else {
        0.5
    };
    base.mul_f64(0.75 + 0.5 * jitter)
}

fn jitter() -> f64 {
    let mut b = [0u8; 2];
    if getrandom::fill(&mut b).is_err() {
        return 0.5;
    }
    f64::from(u16::from_le_bytes(b)) / f64::from(u16::MAX)
}

/// The first DTLS handshake, retried with exponential back-off and jitter until it succeeds
/// (true) or `stop` turns true (false). Failures are logged at most once a minute, plus the
/// first one.
async fn connect(transport: &mut Transport, stop: &mut watch::Receiver<bool>) -> bool {
    let mut failures = 0u32;
    let mut last_log: Option<String> = None;
    loop {
        if *stop.borrow() {
            return false;
        }
        let result = tokio::select! {
            r = transport.handshake() => r,
            _ = stop_requested(stop) => return false,
        };
        let Err(e) = result else {
            if failures > 0 {
                tracing::warn!(attempts = failures + 1, "DTLS session established");
            }
            return true;
        };
        let delay = backoff(failures, jitter());
        failures = failures.saturating_add(1);
        if should_report(failures, &e, &mut last_log) {
            eprintln!(
                "sensor: DTLS handshake failed ({e:#}); {}",
                next_try(delay, failures)
            );
        }
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = stop_requested(stop) => return false,
        }
    }
}

/// Resolves once `stop` turns true; never if its sender is gone without doing so.
async fn stop_requested(stop: &mut watch::Receiver<bool>) {
    if stop.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_is_capped_and_jittered() {
        assert_eq!(backoff(0, 0.5), Duration::from_secs(1));
        assert_eq!(backoff(1, 0.5), Duration::from_secs(2));
        assert_eq!(backoff(3, 0.5), Duration::from_secs(8));
        assert_eq!(backoff(6, 0.5), BACKOFF_CAP);
        assert_eq!(backoff(u32::MAX, 0.5), BACKOFF_CAP);
        assert_eq!(backoff(0, 0.0), Duration::from_millis(750));
        assert_eq!(backoff(0, 1.0), Duration::from_millis(1250));
        assert_eq!(backoff(40, 1.0), BACKOFF_CAP.mul_f64(1.25));
        assert_eq!(backoff(2, f64::NAN), Duration::from_secs(4));
    }
}
