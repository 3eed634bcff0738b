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

/// Attacks from many addresses at once (`sigil soak`): each host an address of 127.0.0.0/8
/// on `lo`, so the server's per-host budgets (an IPv4 address each) meet as many hosts as
/// the attacker has addresses. Every datagram sent and every answer is counted in a
/// [`HostsLoad`]; what the server spent shows in its own counters.
pub mod many_hosts {
    use anyhow::{Context, Result};
    use sigil_client::os::OsRng;
    use sigil_coap::message::option;
    use sigil_coap::{BlockOption, Code, ContentFormat, Message, MessageBuilder, MessageType};
    use sigil_crypto::{CryptoProvider, RustCrypto, SecretKey, SignatureAlgorithm};
    use sigil_identity::Identity;
    use sigil_objects::reading::sign_reading;
    use sigil_objects::senml::{self, Record, Value};
    use sigil_objects::{Freshness, ReadingFormat};
    use std::collections::BTreeMap;
    use std::net::{IpAddr, Ipv4Addr, SocketAddr};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};
    use tokio::net::UdpSocket;
    use tokio::sync::watch;

    /// What one many-hosts attack sent and got back, by answer kind.
    #[derive(Debug, Default, Clone, serde::Serialize)]
    pub struct HostsLoad {
        pub name: String,
        pub hosts: usize,
        pub datagrams_sent: u64,
        pub bytes_sent: u64,
        pub answers: u64,
        pub bytes_received: u64,
        /// Answers by CoAP code (a signed answer as e.g. "4.09 signed"), or "dtls".
        pub codes: BTreeMap<String, u64>,
        /// Datagrams sent from an address the attacker does not hold (a spoofed source):
        /// counted in `datagrams_sent` too; their answers go to that address, not here.
        pub spoofed_sent: u64,
        /// Bytes sent and bytes received, per attacking address (where an attack keeps them).
        #[serde(skip)]
        pub per_host: BTreeMap<IpAddr, [u64; 2]>,
    }

    pub type Load = Arc<Mutex<HostsLoad>>;

    pub fn load(name: &str, hosts: usize) -> Load {
        Arc::new(Mutex::new(HostsLoad {
            name: name.into(),
            hosts,
            ..Default::default()
        }))
    }

    fn sent(l: &Load, n: usize) {
        if let Ok(mut l) = l.lock() {
            l.datagrams_sent += 1;
            l.bytes_sent += n as u64;
        }
    }

    fn answered(l: &Load, answer: &[u8]) {
        let kind = match Message::parse(answer) {
            Ok(m) if m.option(sigil_objects::answer::SIGNATURE_OPTION).is_some() => {
                format!("{} signed", m.code)
            }
            Ok(m) if m.mtype == MessageType::Reset => "Reset".into(),
            Ok(m) => m.code.to_string(),
            Err(_) => "dtls".into(),
        };
        if let Ok(mut l) = l.lock() {
            l.answers += 1;
            l.bytes_received += answer.len() as u64;
            *l.codes.entry(kind).or_insert(0) += 1;
        }
    }

    /// The `i`-th address of a block of hosts: 127.0.`block + i / 256`.`i % 256`.
    pub fn host(block: u8, i: usize) -> Ipv4Addr {
        Ipv4Addr::new(127, 0, block.wrapping_add((i / 256) as u8), (i % 256) as u8)
    }

    async fn socket(ip: Ipv4Addr, server: SocketAddr) -> Result<UdpSocket> {
        let s = UdpSocket::bind(SocketAddr::new(IpAddr::V4(ip), 0))
            .await
            .with_context(|| format!("binding {ip} (the soak needs 127.0.0.0/8 on lo)"))?;
        s.connect(server).await?;
        Ok(s)
    }

    /// Every answer waiting on `s`, counted.
    fn drain(s: &UdpSocket, l: &Load) {
        let mut buf = [0u8; 2048];
        while let Ok(n) = s.try_recv(&mut buf) {
            answered(l, &buf[..n]);
        }
    }

    async fn pause(d: Duration, stop: &mut watch::Receiver<bool>) {
        tokio::select! {
            _ = tokio::time::sleep(d) => {}
            _ = stop.changed() => {}
        }
    }

    /// A CoAP request with options in number order; `extra` are (number, value) pairs above
    /// Uri-Query's.
    #[allow(clippy::too_many_arguments)]
    pub fn request(
        code: Code,
        mid: u16,
        token: &[u8],
        path: &[&str],
        cf: Option<u16>,
        query: &[String],
        block1: Option<BlockOption>,
        extra: &[(u16, &[u8])],
        payload: &[u8],
    ) -> Vec<u8> {
        let mut buf = vec![0u8; payload.len() + 512];
        let Ok(mut b) = MessageBuilder::new(&mut buf, MessageType::Confirmable, code, mid, token)
        else {
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
        for (n, v) in extra {
            let _ = b.option(*n, v);
        }
        match b.finish_with_payload(payload) {
            Ok(n) => {
                buf.truncate(n);
                buf
            }
            Err(_) => Vec::new(),
        }
    }

    /// A PSK client handshake in DTLS records or over the CoAP carrier (`PUT /dtls`). One
    /// lives at a time in a task, and the two are of about the same size.
    #[allow(clippy::large_enum_variant)]
    enum Handshake {
        Records(sigil_dtls::Connection<RustCrypto, sigil_dtls::NoTrust>),
        Carrier(sigil_dtls_coap::Client<RustCrypto, sigil_dtls::NoTrust>),
    }

    impl Handshake {
        fn poll_transmit(&mut self, now: sigil_time::Instant, out: &mut [u8]) -> Option<usize> {
            match self {
                Self::Records(c) => c.poll_transmit(now, out),
                Self::Carrier(c) => c.poll_transmit(now, out),
            }
        }

        /// False when the carrier refused the answer (a refusal in records is not one).
        fn handle(&mut self, now: sigil_time::Instant, datagram: &[u8]) -> bool {
            match self {
                Self::Records(c) => {
                    let _ = c.handle_datagram(now, datagram);
                    true
                }
                Self::Carrier(c) => c.handle_datagram(now, datagram, &mut OsRng).is_ok(),
            }
        }
    }

    /// One handshake under a PSK identity nobody holds, in DTLS records or over the CoAP
    /// carrier (`coap`), taken to the server's first flight after the cookie exchange
    /// (ClientHello, HelloVerifyRequest or its 4.01, ClientHello with the cookie, the
    /// server's flight), then abandoned: a half-open handshake held in the server's table.
    /// `Ok(false)` when the server stopped answering within `wait`, the carrier refused an
    /// answer or `stop` changed first; an error when the handshake could not start. `sent`
    /// and `answered` count each datagram; the clock is the time since `start`.
    #[allow(clippy::too_many_arguments)]
    pub async fn half_open(
        sock: &UdpSocket,
        coap: bool,
        identity: &str,
        start: Instant,
        wait: Duration,
        mut stop: Option<&mut watch::Receiver<bool>>,
        sent: impl Fn(usize),
        answered: impl Fn(&[u8]),
    ) -> Result<bool> {
        let now = || crate::util::since(start);
        let creds = sigil_dtls::Credentials::Psk {
            identity: identity.as_bytes(),
            key: &[7u8; 16],
        };
        let mut hs = if coap {
            Handshake::Carrier(
                sigil_dtls_coap::Client::connect(
                    RustCrypto,
                    sigil_dtls::NoTrust,
                    sigil_dtls_coap::CarrierConfig::default(),
                    &mut OsRng,
                    creds,
                    now(),
                )
                .map_err(|e| anyhow::anyhow!("{e:?}"))?,
            )
        } else {
            Handshake::Records(
                sigil_dtls::Connection::connect(
                    RustCrypto,
                    sigil_dtls::NoTrust,
                    sigil_dtls::Config::default(),
                    &mut OsRng,
                    creds,
                    now(),
                )
                .map_err(|e| anyhow::anyhow!("{e:?}"))?,
            )
        };
        let mut buf = vec![0u8; 2048];
        let mut out = vec![0u8; sigil_dtls::MAX_DATAGRAM.max(sigil_dtls_coap::MAX_DATAGRAM)];
        let mut answers = 0;
        while answers < 2 {
            if stop.as_ref().is_some_and(|s| *s.borrow()) {
                return Ok(false);
            }
            while let Some(n) = hs.poll_transmit(now(), &mut out) {
                sent(n);
                let _ = sock.send(&out[..n]).await;
            }
            let stopped = async {
                match stop.as_mut() {
                    Some(s) => {
                        let _ = s.changed().await;
                    }
                    None => std::future::pending().await,
                }
            };
            let got = tokio::select! {
                r = tokio::time::timeout(wait, sock.recv(&mut buf)) => r,
                _ = stopped => return Ok(false),
            };
            let Ok(Ok(n)) = got else {
                return Ok(false);
            };
            answered(&buf[..n]);
            if !hs.handle(now(), &buf[..n]) {
                return Ok(false);
            }
            answers += 1;
        }
        Ok(true)
    }

    /// Issue 25 finding 3: `hosts` addresses (127.0.`block`.*) each holding one half-open
    /// handshake, as DTLS records or over the CoAP carrier (`PUT /dtls`), renewed every
    /// `renew` (spread over the period, so about `hosts / renew` ClientHellos a second).
    pub async fn half_open_holders(
        server: SocketAddr,
        block: u8,
        hosts: usize,
        coap: bool,
        renew: Duration,
        l: Load,
        stop: watch::Receiver<bool>,
    ) -> Result<()> {
        let mut tasks = Vec::new();
        for i in 0..hosts {
            let sock = socket(host(block, i), server).await?;
            let (l, mut stop) = (l.clone(), stop.clone());
            let offset = renew.mul_f64(i as f64 / hosts.max(1) as f64);
            tasks.push(tokio::spawn(async move {
                pause(offset, &mut stop).await;
                let identity = format!("holder-{block}-{i}");
                while !*stop.borrow() {
                    let _ = half_open(
                        &sock,
                        coap,
                        &identity,
                        Instant::now(),
                        Duration::from_secs(1),
                        None,
                        |n| sent(&l, n),
                        |a| answered(&l, a),
                    )
                    .await;
                    pause(renew, &mut stop).await;
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
        Ok(())
    }

    /// Issue 25 finding 2: a public reading (anyone reads a sensor's latest one) published
    /// again from `hosts` addresses, each asking for a signed answer (option 65000): on old
    /// servers every one is a signed 4.09 from the same signing budget as registrations.
    /// Each host sends one a `per_host` period.
    #[allow(clippy::too_many_arguments)]
    pub async fn resync_replayers(
        server: SocketAddr,
        block: u8,
        hosts: usize,
        href: String,
        reading: Vec<u8>,
        per_host: Duration,
        l: Load,
        stop: watch::Receiver<bool>,
    ) -> Result<()> {
        let path: Vec<String> = href.split('/').map(str::to_string).collect();
        // Groups of 50 hosts per task.
        let mut tasks = Vec::new();
        for g in (0..hosts).step_by(50) {
            let mut socks = Vec::new();
            for i in g..(g + 50).min(hosts) {
                socks.push(socket(host(block, i), server).await?);
            }
            let (l, mut stop, path, reading) =
                (l.clone(), stop.clone(), path.clone(), reading.clone());
            tasks.push(tokio::spawn(async move {
                let p: Vec<&str> = path.iter().map(String::as_str).collect();
                let mut mid = g as u16;
                while !*stop.borrow() {
                    let round = Instant::now();
                    for s in &socks {
                        mid = mid.wrapping_add(1);
                        let d = request(
                            Code::PUT,
                            mid,
                            &mid.to_be_bytes(),
                            &p,
                            Some(ContentFormat::COSE_SIGN1.0),
                            &[],
                            None,
                            &[(sigil_objects::answer::REQUIRE_OPTION, &[])],
                            &reading,
                        );
                        sent(&l, d.len());
                        let _ = s.send(&d).await;
                        drain(s, &l);
                    }
                    pause(per_host.saturating_sub(round.elapsed()), &mut stop).await;
                }
                for s in &socks {
                    drain(s, &l);
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
        Ok(())
    }

    /// Forged readings for `victim` (a registered P-256 sensor): its `kid`, sequence numbers
    /// above `above` (fresh, within the window), signed by another key. Each costs the
    /// server a P-256 verification unless something cheaper refuses it first.
    pub fn forged_readings(victim: &Identity, above: u64, count: u64) -> Result<Vec<Vec<u8>>> {
        let mut k = [0u8; 32];
        sigil_crypto::Rng::fill(&mut OsRng, &mut k).map_err(|e| anyhow::anyhow!("{e}"))?;
        k[0] &= 0x7f;
        k[31] |= 1;
        let rogue = SecretKey::from_bytes(SignatureAlgorithm::EcdsaP256, &k)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let _ = RustCrypto.public_key(&rogue);
        let records = [Record {
            name: Some("t"),
            unit: Some("Cel"),
            value: Some(Value::Number(21.5)),
            ..Default::default()
        }];
        let mut senml_buf = [0u8; 128];
        let n = senml::encode_cbor(&records, &mut senml_buf)?;
        let mut out = Vec::new();
        for seq in above + 1..=above + count {
            let mut scratch = [0u8; 512];
            let mut signed = [0u8; 512];
            let len = sign_reading(
                &RustCrypto,
                &rogue,
                victim,
                ReadingFormat::Cose,
                &Freshness {
                    seq,
                    lsb_bits: None,
                    timestamp: None,
                },
                &senml_buf[..n],
                &mut scratch,
                &mut signed,
            )
            .map_err(|e| anyhow::anyhow!("{e}"))?;
            out.push(signed[..len].to_vec());
        }
        Ok(out)
    }

    /// Issue 25 finding 4: the forged readings sent to the victim's topic from `hosts`
    /// addresses, each host one a `per_host` period.
    #[allow(clippy::too_many_arguments)]
    pub async fn verification_flood(
        server: SocketAddr,
        block: u8,
        hosts: usize,
        href: String,
        forged: Vec<Vec<u8>>,
        per_host: Duration,
        l: Load,
        stop: watch::Receiver<bool>,
    ) -> Result<()> {
        let path: Vec<String> = href.split('/').map(str::to_string).collect();
        let forged = Arc::new(forged);
        let mut tasks = Vec::new();
        for g in (0..hosts).step_by(64) {
            let mut socks = Vec::new();
            for i in g..(g + 64).min(hosts) {
                socks.push(socket(host(block, i), server).await?);
            }
            let (l, mut stop, path, forged) =
                (l.clone(), stop.clone(), path.clone(), forged.clone());
            tasks.push(tokio::spawn(async move {
                let p: Vec<&str> = path.iter().map(String::as_str).collect();
                let mut mid = g as u16;
                let mut k = g;
                while !*stop.borrow() {
                    let round = Instant::now();
                    for s in &socks {
                        mid = mid.wrapping_add(1);
                        k += 1;
                        let d = request(
                            Code::PUT,
                            mid,
                            &mid.to_be_bytes(),
                            &p,
                            Some(ContentFormat::COSE_SIGN1.0),
                            &[],
                            None,
                            &[],
                            &forged[k % forged.len()],
                        );
                        sent(&l, d.len());
                        let _ = s.send(&d).await;
                        drain(s, &l);
                    }
                    pause(per_host.saturating_sub(round.elapsed()), &mut stop).await;
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
        Ok(())
    }

    /// Issue 25 finding 5: three hosts (127.0.`block`.1-3) opening Block1 registrations with
    /// 16-byte first blocks and never finishing them, from `ports` source ports each, `uris`
    /// endpoints per port, renewed every `renew`.
    pub async fn block1_fill(
        server: SocketAddr,
        block: u8,
        ports: usize,
        uris: usize,
        renew: Duration,
        l: Load,
        stop: watch::Receiver<bool>,
    ) -> Result<()> {
        let mut socks = Vec::new();
        for h in 1..=3 {
            for _ in 0..ports {
                socks.push(socket(host(block, h), server).await?);
            }
        }
        let mut stop = stop;
        let payload = [b'x'; 16];
        let mut mid = 0u16;
        while !*stop.borrow() {
            let round = Instant::now();
            for (i, s) in socks.iter().enumerate() {
                for u in 0..uris {
                    mid = mid.wrapping_add(1);
                    let d = request(
                        Code::POST,
                        mid,
                        &mid.to_be_bytes(),
                        &["rd"],
                        Some(ContentFormat::LINK_FORMAT.0),
                        &[format!("ep=fill-{i}-{u}")],
                        Some(BlockOption::new(0, true, 0)),
                        &[],
                        &payload,
                    );
                    sent(&l, d.len());
                    let _ = s.send(&d).await;
                }
                drain(s, &l);
                if i % 32 == 31 {
                    tokio::task::yield_now().await;
                }
            }
            pause(renew.saturating_sub(round.elapsed()), &mut stop).await;
        }
        for s in &socks {
            drain(s, &l);
        }
        Ok(())
    }

    /// A UDP datagram sent from `from`, an address this process does not hold (a raw
    /// IPPROTO_RAW socket, which receives nothing; the IPv4 and UDP headers are written
    /// here). Needs CAP_NET_RAW.
    pub struct Spoofer {
        fd: libc::c_int,
        from: std::net::SocketAddrV4,
    }

    impl Spoofer {
        pub fn new(from: SocketAddr) -> Result<Self> {
            let SocketAddr::V4(from) = from else {
                anyhow::bail!("only IPv4 sources are spoofed");
            };
            // SAFETY: a plain socket call; the descriptor is owned by the value returned.
            let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW) };
            if fd < 0 {
                return Err(std::io::Error::last_os_error()).context("a raw IPv4 socket");
            }
            Ok(Self { fd, from })
        }

        /// `payload` to `to` from the spoofed address (UDP checksum 0: none, which IPv4
        /// allows; the kernel fills in the IPv4 header's checksum and identification).
        pub fn send(&self, to: SocketAddr, payload: &[u8]) -> Result<()> {
            let SocketAddr::V4(to) = to else {
                anyhow::bail!("only IPv4 destinations");
            };
            let udp_len = u16::try_from(payload.len() + 8).context("datagram too long")?;
            let total = udp_len.checked_add(20).context("datagram too long")?;
            let mut d = Vec::with_capacity(usize::from(total));
            d.extend_from_slice(&[0x45, 0]);
            d.extend_from_slice(&total.to_be_bytes());
            d.extend_from_slice(&[0, 0, 0, 0, 64, 17, 0, 0]);
            d.extend_from_slice(&self.from.ip().octets());
            d.extend_from_slice(&to.ip().octets());
            d.extend_from_slice(&self.from.port().to_be_bytes());
            d.extend_from_slice(&to.port().to_be_bytes());
            d.extend_from_slice(&udp_len.to_be_bytes());
            d.extend_from_slice(&[0, 0]);
            d.extend_from_slice(payload);
            // SAFETY: sockaddr_in is plain data (all-zero is valid); `d` and `sa` outlive
            // the call and the lengths are theirs.
            let n = unsafe {
                let mut sa: libc::sockaddr_in = std::mem::zeroed();
                sa.sin_family = libc::AF_INET as libc::sa_family_t;
                sa.sin_addr.s_addr = u32::from(*to.ip()).to_be();
                libc::sendto(
                    self.fd,
                    d.as_ptr().cast(),
                    d.len(),
                    0,
                    (&sa as *const libc::sockaddr_in).cast(),
                    std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
                )
            };
            if n < 0 {
                return Err(std::io::Error::last_os_error()).context("sending a spoofed datagram");
            }
            Ok(())
        }
    }

    impl Drop for Spoofer {
        fn drop(&mut self) {
            // SAFETY: the descriptor is this value's own.
            unsafe {
                libc::close(self.fd);
            }
        }
    }

    /// A CryptoDiet replayer: `datagrams` (a node's recorded hello, then its recorded
    /// messages) sent to `node` from `hosts` addresses, one round every `period`, and, when
    /// `spoof_as` is given (the recorded node's own address as the node sees it), from that
    /// address too (a raw socket; where the machine refuses one, said on stderr and left
    /// out). What the node sends back to the attacker's addresses is counted as answers, per
    /// address: a node that holds no slot for an unproven address sends it nothing.
    #[allow(clippy::too_many_arguments)]
    pub async fn diet_replayers(
        node: SocketAddr,
        block: u8,
        hosts: usize,
        datagrams: Arc<Mutex<Vec<Vec<u8>>>>,
        spoof_as: Option<SocketAddr>,
        period: Duration,
        l: Load,
        stop: watch::Receiver<bool>,
    ) -> Result<()> {
        let mut socks = Vec::new();
        for i in 0..hosts {
            socks.push(socket(host(block, i), node).await?);
        }
        let spoofer = spoof_as.and_then(|a| match Spoofer::new(a) {
            Ok(s) => Some(s),
            Err(e) => {
                eprintln!(
                    "soak: the CryptoDiet replay from the node's own address is left out: {e:#}"
                );
                None
            }
        });
        let mut per_host = vec![[0u64; 2]; hosts];
        let drain_host = |s: &UdpSocket, mine: &mut [u64; 2]| {
            let mut buf = [0u8; 2048];
            while let Ok(n) = s.try_recv(&mut buf) {
                mine[1] += n as u64;
                answered(&l, &buf[..n]);
            }
        };
        let mut stop = stop;
        while !*stop.borrow() {
            let round = Instant::now();
            let recorded = datagrams.lock().map(|d| d.clone()).unwrap_or_default();
            for (i, s) in socks.iter().enumerate() {
                for d in &recorded {
                    sent(&l, d.len());
                    per_host[i][0] += d.len() as u64;
                    let _ = s.send(d).await;
                }
                drain_host(s, &mut per_host[i]);
                if i % 32 == 31 {
                    tokio::task::yield_now().await;
                }
            }
            if let Some(sp) = &spoofer {
                for d in &recorded {
                    if sp.send(node, d).is_ok() {
                        sent(&l, d.len());
                        if let Ok(mut l) = l.lock() {
                            l.spoofed_sent += 1;
                        }
                    }
                }
            }
            pause(period.saturating_sub(round.elapsed()), &mut stop).await;
        }
        // What the node sent since the last round.
        tokio::time::sleep(Duration::from_millis(300)).await;
        for (i, s) in socks.iter().enumerate() {
            drain_host(s, &mut per_host[i]);
        }
        if let Ok(mut l) = l.lock() {
            for (i, b) in per_host.into_iter().enumerate() {
                l.per_host.insert(IpAddr::V4(host(block, i)), b);
            }
        }
        Ok(())
    }
}
