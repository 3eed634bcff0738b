//! `sigil app --follow`: the application of RFC 8387 §7 receiving readings as they are
//! published. It looks the sensors up in the Resource Directory, observes each topic it may
//! read (`GET` with Observe 0, RFC 7641), and verifies every notification end to end as
//! [`crate::app`] verifies fetched readings: the signature over the exact bytes under the
//! registered key, the key bound to the identity, the identity on its own trust list, and each
//! reading numbered above the last one taken from that sensor (a replayed or reordered one
//! fails).
//!
//! Notifications may skip readings (one Confirmable notification in flight at a time, or one
//! lost): a reading numbered more than one above the last taken makes the follower fetch the
//! ones between from the topic's history and verify them first, so each reading is reported
//! once, in order.
//!
//! The server refreshes every observation within its Max-Age; an observation that hears
//! nothing for Max-Age and a quarter more (a server restarted, a lost registration) is
//! registered again, and the directory is looked up again every
//! [`FollowOptions::relookup`], so sensors registered later are followed too. A refusal
//! (no grant, no session, revoked) is reported once with its fix and retried at the next
//! lookup.

use crate::app::{
    fetch_after, lookup_sensors, sensor_trust, topic_failure, verify_readings_after, Announced,
    CheckedReading, Options, Protection, Refused, SensorTrust,
};
use crate::coap::{ClientResponse, CoapClient};
use anyhow::Result;
use sigil_coap::TransmissionParameters;
use sigil_identity::Identity;
use sigil_objects::mac::ReadingKey;
use std::collections::HashSet;
use std::time::Duration;
use tokio::time::Instant;

/// Which sensor an event is about.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SensorRef {
    pub ep: String,
    pub label: String,
    pub topic: String,
}

/// What following reports, as it happens.
#[derive(Clone, Debug, serde::Serialize)]
#[serde(tag = "event", rename_all = "lowercase")]
pub enum Followed {
    /// Observing a sensor's topic started (`again`: after a silence or a refusal).
    Observing {
        #[serde(flatten)]
        sensor: SensorRef,
        again: bool,
    },
    /// A reading, checked here.
    Reading {
        #[serde(flatten)]
        sensor: SensorRef,
        #[serde(flatten)]
        reading: CheckedReading,
    },
    /// The server does not let this reader observe the topic, or ended the observation:
    /// why, with the fix.
    Refused {
        #[serde(flatten)]
        sensor: SensorRef,
        why: String,
    },
}

/// What [`follow`] does beyond [`Options`].
#[derive(Clone, Debug)]
pub struct FollowOptions {
    pub base: Options,
    /// Stop after this many readings (default: never).
    pub count: Option<usize>,
    /// Stop after this long (default: never).
    pub duration: Option<Duration>,
    /// How often the directory is looked up again for new sensors.
    pub relookup: Duration,
}

impl Default for FollowOptions {
    fn default() -> Self {
        Self {
            base: Options::default(),
            count: None,
            duration: None,
            relookup: Duration::from_secs(60),
        }
    }
}

/// One topic followed.
struct Watched {
    a: Announced,
    sensor: SensorRef,
    key_ok: bool,
    trusted: Option<bool>,
    key_error: Option<String>,
    reading_key: Option<ReadingKey>,
    /// The observation's token, while the server holds it.
    token: Option<Vec<u8>>,
    /// Register (again) at this time.
    due: Instant,
    /// The highest reading number taken, and the ETag of the latest reading.
    highest: u64,
    etag: Option<Vec<u8>>,
    /// The refusal last reported, so it is reported once.
    refused: Option<String>,
    observed_before: bool,
}

/// Follows every topic the directory announces (or `options.base.select`) until `count`
/// readings or `duration`; each event goes to `emit` as it happens. Returns the number of
/// readings verified.
pub async fn follow(
    transport: crate::transport::Transport,
    trust: Option<&HashSet<Identity>>,
    psk_nodes: &HashSet<Identity>,
    options: &FollowOptions,
    mut emit: impl FnMut(&Followed),
) -> Result<usize> {
    let mut client = CoapClient::over(transport, TransmissionParameters::default());
    client.timeout = options.base.timeout;
    let start = Instant::now();
    let stop_at = options.duration.map(|d| start + d);
    let mut watched: Vec<Watched> = vec![];
    let mut next_lookup = start;
    let mut readings = 0usize;
    let mut verified = 0usize;
    loop {
        let now = Instant::now();
        if stop_at.is_some_and(|t| now >= t) || options.count.is_some_and(|c| readings >= c) {
            break;
        }
        if now >= next_lookup {
            let (found, _) = lookup_sensors(&mut client, &options.base).await?;
            for a in found {
                if watched.iter().any(|w| w.a.ep == a.ep && w.a.href == a.href) {
                    continue;
                }
                watched.push(watch(&mut client, a, trust, psk_nodes).await);
            }
            next_lookup = Instant::now() + options.relookup;
        }
        for w in watched.iter_mut() {
            if Instant::now() < w.due {
                continue;
            }
            if let Some(r) = register(&mut client, w, options, &mut emit).await {
                taken(w, r, &mut client, &mut emit, &mut readings, &mut verified).await;
            }
        }
        let mut wake = next_lookup;
        for w in &watched {
            wake = wake.min(w.due);
        }
        if let Some(t) = stop_at {
            wake = wake.min(t);
        }
        let wait = wake.saturating_duration_since(Instant::now());
        let Some(n) = client.next_notification(wait).await? else {
            continue;
        };
        let Some(w) = watched
            .iter_mut()
            .find(|w| w.token.as_deref() == Some(n.token.as_slice()))
        else {
            continue;
        };
        if !n.code.is_success() {
            // The last notification (§3.2): the observation is over.
            w.token = None;
            let why = Refused::new(n.code, &n.payload, &w.a.href)
                .reason(options.base.reader.as_deref(), &w.a.ep);
            report_refusal(w, why, &mut emit);
            w.due = next_lookup;
            continue;
        }
        w.due = Instant::now() + silence(n.max_age);
        taken(w, n, &mut client, &mut emit, &mut readings, &mut verified).await;
    }
    client.close().await;
    Ok(verified)
}

/// How long an observation may hear nothing before it is registered again: its Max-Age and a
/// quarter more (60 s when the server gave none, RFC 7252 §5.10.5).
fn silence(max_age: Option<u32>) -> Duration {
    let age = Duration::from_secs(u64::from(max_age.unwrap_or(60)));
    age + age / 4 + Duration::from_secs(1)
}

/// A topic the lookup announced, with what this application's lists say of its sensor.
async fn watch(
    client: &mut CoapClient,
    a: Announced,
    trust: Option<&HashSet<Identity>>,
    psk_nodes: &HashSet<Identity>,
) -> Watched {
    let SensorTrust {
        ep,
        key_ok,
        trusted,
        key_error,
        reading_key,
    } = sensor_trust(client, &a, trust, psk_nodes).await;
    Watched {
        sensor: SensorRef {
            ep: a.ep.clone(),
            label: ep.map(|e| e.short_label().to_string()).unwrap_or_default(),
            topic: a.href.clone(),
        },
        key_ok,
        trusted,
        key_error,
        reading_key,
        token: None,
        due: Instant::now(),
        highest: 0,
        etag: None,
        refused: None,
        observed_before: false,
        a,
    }
}

/// Registers `w`'s observation (again); the answer when it carries a reading to take.
async fn register(
    client: &mut CoapClient,
    w: &mut Watched,
    options: &FollowOptions,
    emit: &mut impl FnMut(&Followed),
) -> Option<ClientResponse> {
    if let Some(old) = w.token.take() {
        // Whatever the server still holds under the old token is answered with Reset.
        client.forget_observation(&old);
    }
    let retry = Instant::now() + options.relookup;
    match client.observe(&w.a.href).await {
        Ok(r) if r.code.is_success() && r.observe.is_some() => {
            w.token = Some(r.token.clone());
            w.due = Instant::now() + silence(r.max_age);
            w.refused = None;
            emit(&Followed::Observing {
                sensor: w.sensor.clone(),
                again: w.observed_before,
            });
            w.observed_before = true;
            (!r.payload.is_empty()).then_some(r)
        }
        Ok(r) if r.code.is_success() => {
            w.due = retry;
            let why = "the server does not take more observations from this reader now (its caps); answered once, tried again later".to_string();
            report_refusal(w, why, emit);
            None
        }
        Ok(r) => {
            w.due = retry;
            let why = Refused::new(r.code, &r.payload, &w.a.href)
                .reason(options.base.reader.as_deref(), &w.a.ep);
            report_refusal(w, why, emit);
            None
        }
        Err(e) => {
            w.due = retry;
            let why = topic_failure(
                &e,
                options.base.reader.as_deref(),
                &w.a.ep,
                options.base.timeout,
            );
            report_refusal(w, why, emit);
            None
        }
    }
}

/// Reports a refusal once (until something else happens).
fn report_refusal(w: &mut Watched, why: String, emit: &mut impl FnMut(&Followed)) {
    if w.refused.as_deref() != Some(why.as_str()) {
        emit(&Followed::Refused {
            sensor: w.sensor.clone(),
            why: why.clone(),
        });
        w.refused = Some(why);
    }
}

/// Takes the reading an answer or notification carries: fetched whole if it came as a first
/// block, passed over if it is the one taken last (a refresh of the same state), verified
/// and reported otherwise.
async fn taken(
    w: &mut Watched,
    n: ClientResponse,
    client: &mut CoapClient,
    emit: &mut impl FnMut(&Followed),
    readings: &mut usize,
    verified: &mut usize,
) {
    if n.payload.is_empty() || (n.etag.is_some() && n.etag == w.etag) {
        return;
    }
    let mut raw = n.payload;
    if n.more {
        match client.get(&w.a.href, &[]).await {
            // The whole of the same reading (a newer one comes as its own notification).
            Ok(whole) if whole.code.is_success() && whole.etag == n.etag => raw = whole.payload,
            _ => return,
        }
    }
    let key_ok = w.key_ok && w.trusted != Some(false);
    let mut checked = verify_readings_after(
        &w.a,
        std::slice::from_ref(&raw),
        key_ok,
        w.reading_key.as_ref(),
        w.highest,
    );
    let Some(mut reading) = checked.pop() else {
        return;
    };
    if reading.protection == Protection::Session {
        // No number of its own: the broker's (its ETag).
        reading.seq = etag_number(n.etag.as_deref()).unwrap_or(w.highest + 1);
    }
    // Readings between the last one taken and this one were not notified (the server sends
    // one notification at a time, or one was lost): fetched from the history and verified
    // the same way, in order, before this one.
    if reading.error.is_none()
        && w.key_error.is_none()
        && reading.protection != Protection::Session
        && w.highest > 0
        && reading.seq > w.highest + 1
    {
        let gap = (reading.seq - w.highest - 1).min(100) as u32;
        if let Ok(raws) = fetch_after(client, &w.a.href, w.highest, gap).await {
            let mut filled =
                verify_readings_after(&w.a, &raws, key_ok, w.reading_key.as_ref(), w.highest);
            filled.retain(|r| r.seq < reading.seq);
            for r in filled {
                report(w, r, emit, readings, verified);
            }
        }
    }
    w.etag = n.etag;
    report(w, reading, emit, readings, verified);
}

/// Reports one checked reading of `w`'s sensor: failed if this application's lists refuse
/// the sensor, counted, and the highest number taken moved on.
fn report(
    w: &mut Watched,
    mut reading: CheckedReading,
    emit: &mut impl FnMut(&Followed),
    readings: &mut usize,
    verified: &mut usize,
) {
    if let Some(why) = &w.key_error {
        reading.verified = false;
        reading.error = Some(why.clone());
    }
    if reading.error.is_none() {
        w.highest = w.highest.max(reading.seq);
    }
    if reading.verified {
        *verified += 1;
    }
    *readings += 1;
    emit(&Followed::Reading {
        sensor: w.sensor.clone(),
        reading,
    });
}

/// The reading number a topic's ETag carries (8 bytes, big-endian).
fn etag_number(etag: Option<&[u8]>) -> Option<u64> {
    Some(u64::from_be_bytes(etag?.try_into().ok()?))
}
