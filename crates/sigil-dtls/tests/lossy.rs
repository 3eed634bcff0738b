//! The PSK handshake over a seeded lossy link: datagrams are dropped, duplicated and delayed
//! (which reorders them), each with probability 1/N. At least 99.9% of 1000 handshakes must
//! complete, and no application record may be delivered twice.

use sigil_crypto::{CryptoError, Rng, RustCrypto};
use sigil_dtls::psk::{
    Config, Connection, CookieKey, Credentials, NoTrust, ServerCredentials, Stateless, Trust,
};

const PSK_ONLY: ServerCredentials<'static> = ServerCredentials {
    psk: true,
    key: None,
    require_client_key: false,
    ..ServerCredentials::NONE
};

struct Counter(u64);
impl Rng for Counter {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), CryptoError> {
        for b in buf {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            *b = (self.0 >> 33) as u8;
        }
        Ok(())
    }
}

struct Keys;
impl Trust for Keys {
    fn psk(&self, identity: &[u8], key: &mut [u8; 64]) -> Option<usize> {
        (identity == b"sensor").then(|| {
            key[..16].copy_from_slice(&[7; 16]);
            16
        })
    }
}

/// The link: a seeded xorshift decides each datagram's fate.
struct Link {
    state: u64,
    one_in: u64,
    /// (deliver at ms, towards the server?, bytes)
    in_flight: Vec<(u64, bool, Vec<u8>)>,
    sent: usize,
}

impl Link {
    fn roll(&mut self) -> u64 {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        self.state
    }

    fn send(&mut self, now: u64, to_server: bool, d: Vec<u8>) {
        self.sent += 1;
        if self.roll() % self.one_in == 0 {
            return; // dropped
        }
        let delay = if self.roll() % self.one_in == 0 {
            50 + self.roll() % 400
        } else {
            10
        };
        if self.roll() % self.one_in == 0 {
            self.in_flight.push((now + delay + 5, to_server, d.clone())); // duplicated
        }
        self.in_flight.push((now + delay, to_server, d));
    }
}

struct Outcome {
    established: bool,
    delivered: Vec<Vec<u8>>,
}

fn run(seed: u64, one_in: u64, readings: usize) -> Outcome {
    let config = Config::default();
    let cookies = CookieKey::new([seed as u8; 32]);
    let mut link = Link {
        state: seed.wrapping_mul(0x9e3779b97f4a7c15) | 1,
        one_in,
        in_flight: vec![],
        sent: 0,
    };
    let mut client = Connection::connect(
        RustCrypto,
        NoTrust,
        config,
        &mut Counter(seed),
        Credentials::Psk {
            identity: b"sensor",
            key: &[7; 16],
        },
        0,
    )
    .unwrap();
    let mut server: Option<Connection<RustCrypto, Keys>> = None;
    let mut now = 0u64;
    let mut buf = [0u8; 2048];
    let mut to_send: Vec<Vec<u8>> = (0..readings)
        .map(|i| format!("reading {i}").into_bytes())
        .collect();
    let mut delivered = vec![];
    while now < 600_000 {
        while let Some(n) = client.poll_transmit(&mut buf) {
            link.send(now, true, buf[..n].to_vec());
        }
        if let Some(s) = server.as_mut() {
            while let Some(n) = s.poll_transmit(&mut buf) {
                link.send(now, false, buf[..n].to_vec());
            }
            while let Some(n) = s.poll_app_data(&mut buf) {
                delivered.push(buf[..n].to_vec());
            }
        }
        if client.is_established() {
            if let Some(r) = to_send.pop() {
                client.send(&r).unwrap();
                continue;
            }
            if server.as_ref().is_some_and(|s| s.is_established()) && link.in_flight.is_empty() {
                break;
            }
        }
        if matches!(client.state(), sigil_dtls::psk::State::Failed(_)) {
            break;
        }
        // Advance virtual time to the next event.
        let next = [
            link.in_flight.iter().map(|(t, _, _)| *t).min(),
            client.poll_timeout(),
            server.as_ref().and_then(|s| s.poll_timeout()),
        ]
        .into_iter()
        .flatten()
        .min();
        let Some(next) = next else { break };
        now = now.max(next);
        client.handle_timeout(now).ok();
        if let Some(s) = server.as_mut() {
            s.handle_timeout(now).ok();
        }
        let (due, later): (Vec<_>, Vec<_>) =
            link.in_flight.drain(..).partition(|(t, _, _)| *t <= now);
        link.in_flight = later;
        for (_, to_server, d) in due {
            if !to_server {
                let _ = client.handle_datagram(now, &d);
                continue;
            }
            match server.as_mut() {
                Some(s) => {
                    let _ = s.handle_datagram(now, &d);
                }
                None => {
                    let mut out = [0u8; 256];
                    match cookies.respond(&RustCrypto, b"peer", &d, &mut out) {
                        Stateless::HelloVerify(n) => link.send(now, false, out[..n].to_vec()),
                        Stateless::Accept => {
                            server = Connection::accept(
                                RustCrypto,
                                Keys,
                                config,
                                &PSK_ONLY,
                                &mut Counter(seed ^ 0xff),
                                &d,
                                now,
                            )
                            .ok();
                        }
                        Stateless::Drop(_) => {}
                    }
                }
            }
        }
    }
    let established =
        client.is_established() && server.as_ref().is_some_and(|s| s.is_established());
    let _ = link.sent;
    Outcome {
        established,
        delivered,
    }
}

#[test]
fn a_thousand_handshakes_over_a_lossy_link() {
    let mut complete = 0;
    for seed in 1..=1000u64 {
        let o = run(seed, 10, 5);
        if o.established {
            complete += 1;
        }
        let mut seen = std::collections::HashSet::new();
        for d in &o.delivered {
            assert!(
                seen.insert(d.clone()),
                "seed {seed}: {:?} delivered twice",
                String::from_utf8_lossy(d)
            );
        }
    }
    eprintln!("{complete}/1000 handshakes completed over a 1-in-10 lossy link");
    assert!(complete >= 999, "{complete}/1000 handshakes completed");
}

#[test]
fn a_clean_link_completes_every_time_and_delivers_everything() {
    for seed in 1..=20u64 {
        let o = run(seed, u64::MAX, 5);
        assert!(o.established, "seed {seed}");
        assert_eq!(o.delivered.len(), 5, "seed {seed}");
    }
}
