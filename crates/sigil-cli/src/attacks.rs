//! The attacks RFC 8387 discusses, mounted against a running server from an attacker's own
//! socket. Each reports what the server answered.

use anyhow::{Context, Result};
use sigil_client::coap::{CoapClient, RequestSpec};
use sigil_client::os::OsRng;
use sigil_coap::message::option;
use sigil_coap::{
    Code, ContentFormat, Message, MessageBuilder, MessageType, TransmissionParameters,
};
use sigil_crypto::{CryptoProvider, PublicKey, RustCrypto};
use sigil_device::{Device, DeviceConfig, MemoryStorage};
use sigil_identity::{Identity, KeyAnnouncement};
use sigil_objects::cose::CoseSign1;
use sigil_objects::reading::sign_reading;
use sigil_objects::senml::{self, Record, Value};
use sigil_objects::{Freshness, ReadingFormat};
use sigil_server::Stats;
use std::net::SocketAddr;
use std::time::Duration;

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct AttackResult {
    pub name: String,
    /// True when the server refused the attack as it should.
    pub refused: bool,
    pub observed: String,
}

fn result(name: &str, refused: bool, observed: impl Into<String>) -> AttackResult {
    AttackResult {
        name: name.into(),
        refused,
        observed: observed.into(),
    }
}

/// Sends one request and describes the answer: a response code, or "Reset".
async fn try_request(client: &mut CoapClient, code: Code, spec: &RequestSpec<'_>) -> String {
    match client.request(code, spec).await {
        Ok(r) => format!("{} {}", r.code, String::from_utf8_lossy(&r.payload)),
        Err(e) if e.to_string().contains("Reset") => "Reset".into(),
        Err(e) => format!("error: {e}"),
    }
}

pub async fn run_all(server: SocketAddr, stats: &Stats) -> Result<Vec<AttackResult>> {
    let params = TransmissionParameters {
        ack_timeout: Duration::from_millis(500),
        ..Default::default()
    };
    let mut client = CoapClient::connect(server, params).await?;
    let lookup = client.get("rd-lookup/res", &[]).await?;
    let announced = sigil_client::app::parse_lookup(&String::from_utf8_lossy(&lookup.payload))?;
    let target = announced
        .iter()
        .find(|a| a.content_format == Some(18))
        .context("no COSE sensor registered to attack")?;
    let latest = client.get(&target.href, &[]).await?;
    anyhow::ensure!(
        latest.code == Code::CONTENT,
        "no reading to capture yet ({})",
        latest.code
    );
    let captured = latest.payload;
    let mut out = Vec::new();

    // 1. Replay a captured reading (§8.2): answered with Reset, nothing stored.
    let spec = RequestSpec {
        path: &target.href,
        content_format: Some(18),
        payload: &captured,
        ..Default::default()
    };
    let seen = try_request(&mut client, Code::PUT, &spec).await;
    out.push(result("replayed reading", seen == "Reset", seen));

    // 2. Tamper with a captured reading: change one byte of its SenML payload, and give it a
    // fresh number (a copy at or below the mark is refused by its number before its
    // signature is checked), so the signature is what refuses it.
    let mut tampered = captured.clone();
    if let Ok(c) = CoseSign1::parse(&captured) {
        let mut payload = c.payload.to_vec();
        if let Some(last) = payload.last_mut() {
            *last ^= 0x01;
        }
        let seq = match c.headers.seq {
            Some(sigil_objects::cose::SeqField::Full(s)) => s + 500,
            _ => 500,
        };
        let (mut protected, mut out) = ([0u8; 256], vec![0u8; captured.len() + 64]);
        let renumbered = sigil_objects::cose::encode_protected(
            c.headers.alg.unwrap_or(-8),
            c.headers.kid.unwrap_or_default(),
            sigil_objects::cose::SeqField::Full(seq),
            c.headers.time,
            &mut protected,
        )
        .and_then(|n| {
            sigil_objects::cose::encode_sign1(&protected[..n], &payload, c.signature, &mut out)
        });
        if let Ok(n) = renumbered {
            out.truncate(n);
            tampered = out;
        }
    }
    let spec = RequestSpec {
        path: &target.href,
        content_format: Some(18),
        payload: &tampered,
        ..Default::default()
    };
    let seen = try_request(&mut client, Code::PUT, &spec).await;
    out.push(result("tampered reading", seen.starts_with("4.01"), seen));

    // 3. A device whose identity nobody provisioned: its registration is refused...
    let mut storage = MemoryStorage::default();
    let mut rogue = Device::boot(
        RustCrypto,
        DeviceConfig::default(),
        &mut storage,
        &mut OsRng,
        &[],
        &[],
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    rogue
        .handle_timeout(sigil_time::Instant::ZERO, &mut storage)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut buf = [0u8; 2048];
    let n = rogue
        .poll_transmit(&mut buf)
        .context("rogue device sent nothing")?;
    client.send_raw(&buf[..n]).await?;
    let seen = match client.recv_raw(Duration::from_secs(5)).await {
        Some(d) => Message::parse(&d)
            .map(|m| m.code.to_string())
            .unwrap_or_else(|e| e.to_string()),
        None => "no answer".into(),
    };
    out.push(result(
        "registration from an unprovisioned identity",
        seen == "4.03",
        seen,
    ));

    // ... and so is a reading it signs and publishes to a provisioned sensor's topic.
    let rogue_key = storage.key.clone().context("rogue key")?;
    let rogue_id = *rogue.identity();
    let records = [Record {
        name: Some("t"),
        unit: Some("Cel"),
        value: Some(Value::Number(99.0)),
        ..Default::default()
    }];
    let mut senml_buf = [0u8; 128];
    let sn = senml::encode_cbor(&records, &mut senml_buf)?;
    let mut scratch = [0u8; 512];
    let mut signed = [0u8; 512];
    let len = sign_reading(
        &RustCrypto,
        &rogue_key,
        &rogue_id,
        ReadingFormat::Cose,
        &Freshness {
            seq: u32::MAX as u64,
            lsb_bits: None,
            timestamp: None,
        },
        &senml_buf[..sn],
        &mut scratch,
        &mut signed,
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let spec = RequestSpec {
        path: &target.href,
        content_format: Some(18),
        payload: &signed[..len],
        ..Default::default()
    };
    let seen = try_request(&mut client, Code::PUT, &spec).await;
    out.push(result(
        "reading from an unprovisioned identity",
        seen.starts_with("4.03"),
        seen,
    ));

    // 4. Registration under a provisioned identity with a key that does not hash to it.
    let victim = Identity::parse(&target.ep)?;
    let rogue_pk = RustCrypto
        .public_key(&rogue_key)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut links = String::from("</m>;rt=\"sigil.env\";ct=18");
    KeyAnnouncement::new(rogue_pk, b"")
        .context("announcement")?
        .emit(&mut links, [] as [PublicKey; 0])?;
    let spec = RequestSpec {
        path: "rd",
        query: vec![format!("ep={victim}"), "lt=300".into()],
        content_format: Some(ContentFormat::LINK_FORMAT.0),
        payload: links.as_bytes(),
        ..Default::default()
    };
    let seen = try_request(&mut client, Code::POST, &spec).await;
    out.push(result(
        "registration with a key not matching its identity",
        seen.starts_with("4.03"),
        seen,
    ));

    // 5. Issue 12: a sensor's registration changed by anyone with plain CoAP. Its own key
    //    announcement with its topic's format switched to JOSE (every reading would then be
    //    refused with 4.15), and a one-second lifetime (the entry would expire). Only the
    //    sensor's statement or its session may change its registration (4.01 or 4.03).
    let owner_refused = |seen: &str| seen.starts_with("4.01") || seen.starts_with("4.03");
    if let Some(key) = target.key {
        let mut links = String::from("</m>;rt=\"sigil.env\";ct=65100");
        KeyAnnouncement::new(key, &target.other)
            .context("announcement")?
            .emit(&mut links, target.group.iter())?;
        let spec = RequestSpec {
            path: "rd",
            query: vec![format!("ep={victim}"), "lt=300".into()],
            content_format: Some(ContentFormat::LINK_FORMAT.0),
            payload: links.as_bytes(),
            ..Default::default()
        };
        let seen = try_request(&mut client, Code::POST, &spec).await;
        out.push(result(
            "unsigned re-registration with another content format",
            owner_refused(&seen),
            seen,
        ));
    }
    let location = target
        .href
        .split('/')
        .nth(2)
        .map(|n| format!("rd/{n}"))
        .context("topic without a registration number")?;
    let spec = RequestSpec {
        path: &location,
        query: vec!["lt=1".into()],
        ..Default::default()
    };
    let seen = try_request(&mut client, Code::POST, &spec).await;
    out.push(result(
        "unsigned update to a one-second lifetime",
        owner_refused(&seen),
        seen,
    ));

    // 6. A burst of malformed datagrams; the server must keep serving.
    let before = stats.get("coap.malformed");
    let mut sent_malformed = 0u64;
    let mut seed = sigil_client::os::random_u32() | 1;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        seed
    };
    for i in 0..1000u32 {
        let mut d: Vec<u8> = match i % 4 {
            // Random bytes.
            0 => (0..(next() % 120)).map(|_| next() as u8).collect(),
            // A valid header with a truncated option.
            1 => vec![0x40, 0x01, (i >> 8) as u8, i as u8, 0xbd, 0x05, b'r'],
            // Reserved token length.
            2 => vec![0x4f, 0x01, 0, 0, 1, 2, 3],
            // A captured reading cut short inside its options.
            _ => {
                let mut m = [0u8; 64];
                let mut b = MessageBuilder::new(
                    &mut m,
                    MessageType::Confirmable,
                    Code::PUT,
                    i as u16,
                    &[1],
                )
                .map_err(|e| anyhow::anyhow!("{e}"))?;
                b.option(option::URI_PATH, b"ps")
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                let n = b.finish();
                let mut v = m[..n].to_vec();
                v.push(0xe0);
                v
            }
        };
        if Message::parse(&d).is_ok() {
            // Keep the burst malformed: an unknown version makes any datagram unparseable.
            d[0] = (d[0] & 0x3f) | 0x80;
        }
        sent_malformed += 1;
        client.send_raw(&d).await?;
        if i % 100 == 99 {
            tokio::task::yield_now().await;
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let counted = stats.get("coap.malformed") - before;
    let alive = client
        .get(".well-known/core", &[])
        .await
        .map(|r| r.code == Code::CONTENT)
        .unwrap_or(false);
    out.push(result(
        "burst of 1000 malformed datagrams",
        alive && counted >= sent_malformed,
        format!(
            "{counted} counted as malformed, server {}",
            if alive {
                "still serving"
            } else {
                "NOT ANSWERING"
            }
        ),
    ));
    Ok(out)
}
