//! The soak's control-plane attacks (docs/security.md's 1, 2 and 4-8), each from its own
//! loopback address, and what an attacker reads of a sensor for the many-hosts replays.

use super::AttackLoad;
use anyhow::{Context, Result};
use sigil_coap::{BlockOption, Code, ContentFormat, Message};
use sigil_crypto::PublicKey;
use sigil_identity::KeyAnnouncement;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::UdpSocket;
use tokio::sync::watch;

type Shared = Arc<Mutex<AttackLoad>>;

pub(super) fn load(name: &'static str) -> Shared {
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

/// One attack datagram: a Confirmable request whose token is its message ID.
fn coap(
    code: Code,
    mid: u16,
    path: &[&str],
    query: &[String],
    block1: Option<BlockOption>,
    cf: Option<u16>,
    payload: &[u8],
) -> Vec<u8> {
    let token = mid.to_be_bytes();
    crate::attacks::many_hosts::request(code, mid, &token, path, cf, query, block1, &[], payload)
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
pub(super) struct Victim {
    pub(super) ep: String,
    pub(super) key: PublicKey,
}

/// Attacks 1 and 2: forged registrations, lifetime changes and removals of every entry.
pub(super) async fn control_plane(
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
                    Code::POST,
                    0,
                    &["rd", &id],
                    &[lt.into()],
                    None,
                    None,
                    &[],
                ));
            }
            out.push(coap(Code::DELETE, 0, &["rd", &id], &[], None, None, &[]));
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
pub(super) async fn reflector(
    server: SocketAddr,
    l: Shared,
    mut stop: watch::Receiver<bool>,
) -> Result<()> {
    let mut a = Attacker::open(12, server, l).await?;
    let requests = [
        coap(
            Code::GET,
            0,
            &["ps", "1", "m"],
            &["n=100".into()],
            None,
            None,
            &[],
        ),
        coap(Code::GET, 0, &["rd-lookup", "res"], &[], None, None, &[]),
        coap(Code::GET, 0, &["ps"], &[], None, None, &[]),
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
pub(super) async fn block1_holders(
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
/// answers; each handshake is abandoned after the server's first flight. Every other port
/// carries its handshakes as a CoAP resource: `PUT /dtls`, its 4.01 with the
/// HelloVerifyRequest, the `PUT` with the cookie and the server's 2.01 (a session resource in
/// its handshake); then the same again from the same port, leaving each handshake half open.
pub(super) async fn handshake_flood(
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
            while !*stop.borrow() {
                let held = crate::attacks::many_hosts::half_open(
                    &sock,
                    i % 2 == 1,
                    &identity,
                    start,
                    Duration::from_millis(500),
                    Some(&mut stop),
                    |n| note_sent(&l, n),
                    |a| note_answer(&l, 0, a),
                )
                .await;
                if held.is_err() {
                    return;
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

/// Attack 8: refused requests as fast as the socket takes them (1,000 a second).
pub(super) async fn refusals(
    server: SocketAddr,
    l: Shared,
    mut stop: watch::Receiver<bool>,
) -> Result<()> {
    let mut a = Attacker::open(15, server, l).await?;
    let refused = coap(
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

/// The topic, latest reading, its sequence number and its `kid` of the sensor `ep`, as anyone
/// reads them from the directory and the broker.
pub(super) async fn public_reading(
    server: SocketAddr,
    ep: &str,
) -> Result<(String, Vec<u8>, u64, sigil_identity::Identity)> {
    let params = sigil_coap::TransmissionParameters {
        ack_timeout: Duration::from_millis(500),
        ..Default::default()
    };
    let mut client = sigil_client::CoapClient::connect(server, params).await?;
    let lookup = client.get("rd-lookup/res", &[]).await?;
    let announced = sigil_client::app::parse_lookup(&String::from_utf8_lossy(&lookup.payload))?;
    let target = announced
        .iter()
        .find(|a| a.ep == ep)
        .context("the sensor is not in the directory")?;
    let href = target.href.trim_start_matches('/').to_string();
    let latest = client.get(&href, &[]).await?;
    anyhow::ensure!(
        latest.code == Code::CONTENT,
        "no latest reading ({})",
        latest.code
    );
    let r = sigil_objects::reading::SignedReading::parse(
        sigil_objects::ReadingFormat::Cose,
        &latest.payload,
    )
    .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let seq = r
        .full_seq()
        .context("the reading sends only low bits of its number")?;
    let kid = r.kid;
    client.close().await;
    Ok((href, latest.payload, seq, kid))
}
