//! The coaps:// tables under floods (docs/security.md, "DTLS tables under a flood"), with real
//! `sigil-dtls` clients against the server's DTLS layer, dispatcher and service on virtual
//! time. Byte counts are the server's own accounting (`ByteBudget`, the `mem.dtls_*` gauges).
//!
//! Attack 7: a host that answers cookies (it does the stateless exchange from its own address)
//! sends ClientHellos with valid cookies from hundreds of ports. Before the per-host limits it
//! kept the handshake table full for as long as it went on, and new devices got no handshake
//! until the flood had stopped and its entries had gone stale.

use sigil_crypto::RustCrypto;
use sigil_dtls::{Config, Connection, Credentials};
use sigil_server::budget::Host;
use sigil_server::secure::{HANDSHAKE_BYTES, RESUMPTION_BYTES, SESSION_BYTES};
use sigil_testkit::Seeded;
use std::net::SocketAddr;
use std::time::Duration;

use common::{coap_get, ms, run, step, AnyServer, Client, Peer, Secure as Server};
use sigil_testkit::server as common;

/// A host that answers cookies: each new port runs the stateless exchange and sends its
/// ClientHello with a valid cookie, then says nothing more (the handshake stays half-open).
/// No client state is kept, so the flood costs the test nothing per port.
struct Flood {
    ip: [u8; 4],
    next_port: u16,
    hellos_with_cookie: u64,
}

impl Flood {
    fn new(ip: [u8; 4]) -> Self {
        Self {
            ip,
            next_port: 10_000,
            hellos_with_cookie: 0,
        }
    }

    fn host(&self) -> Host {
        Host::of_ip(self.ip.into())
    }

    fn burst(&mut self, s: &mut Server, now: u64, ports: usize) {
        for _ in 0..ports {
            let addr = SocketAddr::from((self.ip, self.next_port));
            self.next_port += 1;
            let mut c = Connection::connect(
                RustCrypto,
                AnyServer,
                Config::default(),
                // A new random per ClientHello, also when a port is used again.
                &mut Seeded(u64::from(self.next_port) ^ (self.hellos_with_cookie << 20)),
                Credentials::Psk {
                    identity: b"nobody",
                    key: &[1; 16],
                },
                ms(now),
            )
            .unwrap();
            let mut buf = [0u8; 1500];
            let n = c.poll_transmit(ms(now), &mut buf).unwrap();
            // (The server's retransmissions to the flood's earlier ports come out too.)
            let verify: Vec<_> = s
                .handle(now, vec![(addr, buf[..n].to_vec())])
                .into_iter()
                .filter(|(to, _)| *to == addr)
                .collect();
            assert_eq!(verify.len(), 1, "a HelloVerifyRequest");
            c.handle_datagram(ms(now), &verify[0].1).unwrap();
            let n = c.poll_transmit(ms(now), &mut buf).unwrap();
            s.handle(now, vec![(addr, buf[..n].to_vec())]);
            self.hellos_with_cookie += 1;
        }
    }
}

/// The table's gauges agree with the layer's accounting, and stay within the caps.
fn gauges_within_caps(s: &Server) {
    for (name, b) in [
        ("dtls_handshakes", s.layer.handshake_budget()),
        ("dtls_sessions", s.layer.session_budget()),
        ("dtls_resumption", s.layer.resumption_budget()),
    ] {
        assert_eq!(
            s.count(&format!("mem.{name}.bytes")),
            b.used() as u64,
            "{name}"
        );
        assert_eq!(
            s.count(&format!("mem.{name}.cap")),
            b.caps().total as u64,
            "{name}"
        );
        assert!(b.used() <= b.caps().total, "{name}");
        assert!(b.peak() <= b.caps().total, "{name}");
    }
}

#[test]
fn attack_7_a_cookie_returning_flood_from_one_host_does_not_lock_out_new_devices() {
    // The server's defaults: 256 handshakes, 16 per host, 30 s before one is stale.
    let mut s = Server::new(|_| {});
    let key = [5; 16];
    let text = s.provision_psk(1, &key).to_string();
    let mut now = 0;
    // A device connected before the flood.
    let mut old = Client::psk("10.1.0.1:40001".parse().unwrap(), &text, &key, 11, now);
    run(&mut s, &mut [&mut old], &mut now, 100);
    assert!(old.conn.is_established());

    // The flood: 8 new ports every 10 ms, far more ClientHellos with valid cookies than the
    // whole table holds, and it goes on while the new device connects.
    let mut flood = Flood::new([192, 0, 2, 66]);
    let hs = s.layer.handshake_budget().caps();
    let quiet_until = now + 1_000;
    while now < quiet_until {
        flood.burst(&mut s, now, 8);
        now += 10;
    }
    assert!(flood.hellos_with_cookie >= 800);
    assert!(flood.hellos_with_cookie as usize > 3 * s.layer.handshakes().max(256));
    // The flood host holds its share of half-open handshakes and no more.
    assert_eq!(hs.per_host, 16 * HANDSHAKE_BYTES);
    assert_eq!(
        s.layer.handshake_budget().held_by(flood.host()),
        hs.per_host
    );
    assert_eq!(s.layer.handshakes(), 16);
    assert_eq!(
        s.count("dtls.refused_host_handshakes"),
        flood.hellos_with_cookie - 16
    );

    // A new device from another host, while the flood goes on: its first ClientHello gets a
    // handshake, so it completes without a single retransmission (the first timer is 1 s)
    // and its request is answered in the same round trips.
    let mut new = Client::psk("10.2.0.2:40002".parse().unwrap(), &text, &key, 12, now);
    let started = now;
    let mut answered_at = None;
    let mut asked = false;
    while now < started + 5_000 {
        flood.burst(&mut s, now, 8);
        step(&mut s, &mut [&mut new, &mut old], now);
        if new.conn.is_established() && !asked {
            new.conn.send(&coap_get(".well-known/core", 1)).unwrap();
            asked = true;
            step(&mut s, &mut [&mut new], now);
        }
        if answered_at.is_none() && new.answered() == 1 {
            answered_at = Some(now);
        }
        // The flood host stays within its share; the table within its total.
        assert!(s.layer.handshake_budget().held_by(flood.host()) <= hs.per_host);
        assert!(s.layer.handshake_budget().used() <= hs.total);
        now += 10;
    }
    let took = answered_at.expect("the new device was answered during the flood") - started;
    assert!(took < 1_000, "answered after {took} ms of virtual time");
    assert!(flood.hellos_with_cookie >= 4_800);

    // The device connected before the flood kept its session and is still served.
    assert_eq!(s.layer.sessions(), 2);
    assert_eq!(s.count("dtls.session_evicted_idle"), 0);
    old.conn.send(&coap_get(".well-known/core", 2)).unwrap();
    step(&mut s, &mut [&mut old], now);
    assert_eq!(old.answered(), 1);
    gauges_within_caps(&s);
    assert_eq!(
        s.count("mem.dtls_handshakes.bytes"),
        (16 * HANDSHAKE_BYTES) as u64
    );
    assert_eq!(
        s.count("mem.dtls_sessions.bytes"),
        (2 * SESSION_BYTES) as u64
    );
}

#[test]
fn a_flood_from_several_hosts_gives_way_to_a_newcomer_oldest_of_the_heaviest_first() {
    let mut s = Server::new(|c| {
        c.max_handshakes = 32;
        c.max_handshakes_per_host = 8;
    });
    let key = [6; 16];
    let text = s.provision_psk(2, &key).to_string();
    let mut now = 0;
    // Five hosts that return cookies: the first four fill the table (8 each); then one of
    // them holds 8 and the fifth is refused until someone holds more than it would.
    // (The fifth comes once the first four's handshakes are past their 7 s shield.)
    let mut floods: Vec<Flood> = (0..5).map(|i| Flood::new([198, 51, 100, 10 + i])).collect();
    for (i, f) in floods.iter_mut().enumerate() {
        if i == 4 {
            now = 7_100;
        }
        f.burst(&mut s, now, 12);
        now += 10;
    }
    assert_eq!(s.layer.handshakes(), 32);
    let held: Vec<usize> = floods
        .iter()
        .map(|f| s.layer.handshake_budget().held_by(f.host()) / HANDSHAKE_BYTES)
        .collect();
    // The fifth host took slots from the heaviest until no host held more than it would.
    assert!(held.iter().all(|n| *n <= 8), "{held:?}");
    // It took as many as the eviction budget's reserve allows at once (4 for this table).
    assert!(held[4] >= 4, "{held:?}");
    assert!(s.count("dtls.handshake_evicted") >= 4);
    assert!(s.count("dtls.refused_eviction_budget") > 0);
    // (The budget refills at 32 per 30 s.)
    now += 1_000;

    // A device from a sixth host gets in at once by pushing out the oldest half-open
    // handshake of a host holding the most.
    let evicted = s.count("dtls.handshake_evicted");
    let mut new = Client::psk("10.3.0.3:40003".parse().unwrap(), &text, &key, 13, now);
    run(&mut s, &mut [&mut new], &mut now, 20);
    assert!(new.conn.is_established());
    // (By then the first four hosts' handshakes went 8 s without progress: they expire.)
    assert!(
        s.count("dtls.handshake_evicted") + s.count("dtls.handshake_expired_crowded") > evicted
    );
    gauges_within_caps(&s);

    // A table shared by many hosts with one half-open handshake each: a newcomer whose host
    // holds none pushes out the oldest stranger's, but only once that one has gone 7 s
    // without progress (RFC 6347's retransmissions at 1, 2 and 4 s); before, it is refused.
    let mut s = Server::new(|c| c.max_handshakes = 8);
    let mut one_each: Vec<Flood> = (0..8).map(|i| Flood::new([203, 0, 113, i])).collect();
    for f in &mut one_each {
        f.burst(&mut s, 0, 1);
    }
    let mut ninth = Flood::new([203, 0, 113, 99]);
    ninth.burst(&mut s, 0, 1);
    assert_eq!(s.layer.handshakes(), 8);
    assert_eq!(s.count("dtls.handshake_evicted"), 0);
    assert_eq!(s.count("dtls.refused_tables_full"), 1);
    let mut tenth = Flood::new([203, 0, 113, 100]);
    tenth.burst(&mut s, 6_900, 1);
    assert_eq!(s.count("dtls.refused_tables_full"), 2);
    tenth.burst(&mut s, 7_000, 1);
    assert_eq!(s.layer.handshakes(), 8);
    assert_eq!(s.count("dtls.handshake_evicted_oldest"), 1);
    assert_eq!(
        s.layer.handshake_budget().held_by(tenth.host()),
        HANDSHAKE_BYTES
    );
    // One of the eight (all started at once, so any of them is the oldest) gave way.
    let gone = one_each
        .iter()
        .filter(|f| s.layer.handshake_budget().held_by(f.host()) == 0)
        .count();
    assert_eq!(gone, 1);
}

#[test]
fn sessions_from_one_host_stay_within_its_share_and_others_still_connect() {
    // A quarter of the session table per host (the defaults' fraction, 1024 of 4096).
    let mut s = Server::new(|c| {
        c.max_sessions = 8;
        c.max_sessions_per_host = 2;
    });
    let key = [7; 16];
    let text = s.provision_psk(3, &key).to_string();
    let mut now = 0;
    // Six devices behind one NAT address.
    let mut nat: Vec<Client> = (0..6)
        .map(|i| {
            Client::psk(
                SocketAddr::from(([100, 64, 0, 1], 50_000 + i)),
                &text,
                &key,
                100 + u64::from(i),
                now,
            )
        })
        .collect();
    {
        let mut all: Vec<&mut Client> = nat.iter_mut().collect();
        run(&mut s, &mut all, &mut now, 200);
    }
    let nat_host = Host::of("100.64.0.1:1".parse().unwrap());
    let established = nat.iter().filter(|c| c.conn.is_established()).count();
    assert_eq!(established, 2);
    assert_eq!(
        s.layer.session_budget().held_by(nat_host),
        2 * SESSION_BYTES
    );
    assert_eq!(s.layer.session_budget().caps().per_host, 2 * SESSION_BYTES);
    assert!(s.count("dtls.refused_host_sessions") >= 4);

    // Their retransmissions keep being refused, and the two sessions are not pushed out.
    {
        let mut all: Vec<&mut Client> = nat.iter_mut().collect();
        run(&mut s, &mut all, &mut now, 5_000);
    }
    assert_eq!(nat.iter().filter(|c| c.conn.is_established()).count(), 2);
    assert!(s.layer.session_budget().held_by(nat_host) <= 2 * SESSION_BYTES);

    // Devices from other hosts still connect.
    for i in 0..3u8 {
        let mut other = Client::psk(
            SocketAddr::from(([10, 4, 0, i], 40_000)),
            &text,
            &key,
            200 + u64::from(i),
            now,
        );
        run(&mut s, &mut [&mut other], &mut now, 50);
        assert!(other.conn.is_established());
    }
    assert_eq!(s.layer.sessions(), 5);
    for c in nat.iter_mut().filter(|c| c.conn.is_established()) {
        c.conn.send(&coap_get(".well-known/core", 3)).unwrap();
        step(&mut s, &mut [c], now);
        assert_eq!(c.answered(), 1);
    }
    // The resumption cache is held to the same share per host.
    assert!(s.layer.resumption_budget().held_by(nat_host) <= 2 * RESUMPTION_BYTES);
    gauges_within_caps(&s);
}

#[test]
fn memory_gauges_return_to_zero_once_handshakes_time_out_and_sessions_idle_out() {
    let mut s = Server::new(|c| {
        c.handshake_timeout = Duration::from_secs(10);
        c.session_idle = Duration::from_secs(60);
        c.session_lifetime = Duration::from_secs(120);
    });
    let key = [8; 16];
    let text = s.provision_psk(4, &key).to_string();
    let mut now = 0;
    let mut flood = Flood::new([192, 0, 2, 77]);
    flood.burst(&mut s, now, 100);
    let mut devices: Vec<Client> = (0..3u8)
        .map(|i| {
            Client::psk(
                SocketAddr::from(([10, 5, 0, i], 40_000)),
                &text,
                &key,
                300 + u64::from(i),
                now,
            )
        })
        .collect();
    {
        let mut all: Vec<&mut Client> = devices.iter_mut().collect();
        run(&mut s, &mut all, &mut now, 100);
    }
    assert!(devices.iter().all(|c| c.conn.is_established()));
    assert_eq!(
        s.count("mem.dtls_handshakes.bytes"),
        (16 * HANDSHAKE_BYTES) as u64
    );
    assert_eq!(
        s.count("mem.dtls_sessions.bytes"),
        (3 * SESSION_BYTES) as u64
    );
    assert_eq!(
        s.count("mem.dtls_resumption.bytes"),
        (3 * RESUMPTION_BYTES) as u64
    );
    assert_eq!(s.count("mem.dtls_sessions.hosts"), 3);

    // Nobody says anything more: the half-open handshakes time out (their flights are
    // retransmitted, then given up, or they go stale at 10 s).
    let tick = |s: &mut Server, until: u64, now: &mut u64| {
        while *now < until {
            s.handle(*now, vec![]);
            *now += 500;
        }
    };
    tick(&mut s, 11_000, &mut now);
    assert_eq!(s.count("mem.dtls_handshakes.bytes"), 0);
    assert_eq!(s.count("mem.dtls_handshakes.hosts"), 0);
    assert_eq!(s.layer.handshakes(), 0);
    assert_eq!(
        s.count("mem.dtls_sessions.bytes"),
        (3 * SESSION_BYTES) as u64
    );
    // The sessions idle out after 60 s.
    tick(&mut s, 61_000, &mut now);
    assert_eq!(s.count("mem.dtls_sessions.bytes"), 0);
    assert_eq!(s.count("mem.dtls_sessions.hosts"), 0);
    assert_eq!(s.layer.sessions(), 0);
    assert_eq!(s.count("dtls.session_evicted_idle"), 3);
    // Resumable sessions after their 120 s lifetime.
    assert_eq!(
        s.count("mem.dtls_resumption.bytes"),
        (3 * RESUMPTION_BYTES) as u64
    );
    tick(&mut s, 121_000, &mut now);
    assert_eq!(s.count("mem.dtls_resumption.bytes"), 0);
    assert_eq!(s.count("mem.dtls_resumption.hosts"), 0);
    // The peak remembers the flood's share and the devices' handshakes.
    assert_eq!(
        s.count("mem.dtls_handshakes.peak"),
        (19 * HANDSHAKE_BYTES) as u64
    );
    gauges_within_caps(&s);
}

#[test]
fn a_host_that_restarts_its_handshakes_is_held_to_its_handshake_rate() {
    // Each ClientHello with a valid cookie costs the server a handshake start (for keys: a
    // key exchange and a signature). A host that starts over from the same port at once
    // keeps within its half-open share, so only the rate bounds what it costs: 32 at once,
    // then 8 per second.
    let mut s = Server::new(|_| {});
    let key = [5; 16];
    let text = s.provision_psk(1, &key).to_string();
    let mut flood = Flood::new([192, 0, 2, 77]);
    let mut now = 0;
    while now < 10_000 {
        flood.next_port = 10_000;
        flood.burst(&mut s, now, 1);
        now += 10;
    }
    let started = s.count("dtls.handshake_started");
    assert_eq!(flood.hellos_with_cookie, 1_000);
    assert!(
        (32 + 8 * 9..=32 + 8 * 10 + 1).contains(&started),
        "{started} handshakes started in 10 s"
    );
    assert_eq!(s.count("dtls.refused_host_rate"), 1_000 - started);
    assert!(
        s.layer.handshakes() <= 1,
        "one port, one half-open handshake at most"
    );

    // Another host is not held back by it.
    let mut other = Client::psk("10.3.0.3:40003".parse().unwrap(), &text, &key, 13, now);
    run(&mut s, &mut [&mut other], &mut now, 200);
    assert!(other.conn.is_established());

    // After 1.2 quiet seconds (the other host's 200 ms and one more) the host may start
    // 9.6 more (plus what was left of a token), and no more.
    now += 1_000;
    let before = s.count("dtls.handshake_started");
    for _ in 0..20 {
        flood.next_port = 10_000;
        flood.burst(&mut s, now, 1);
    }
    let again = s.count("dtls.handshake_started") - before;
    assert!((9..=10).contains(&again), "{again} after 1.2 s");
    // Two hosts have a bucket (the flood's and the other device's).
    s.layer.publish();
    assert_eq!(s.count("dtls.rate_hosts"), 2);
}

/// Sends one half-open handshake from `addr` (the cookie exchange, then the ClientHello with
/// its cookie, then silence), optionally asking to resume `session`, with `patch` applied to
/// both ClientHellos. Returns whether the server answered the second (a handshake started).
fn half_open(
    s: &mut Server,
    addr: SocketAddr,
    now: u64,
    seed: u64,
    session: Option<(&sigil_dtls::Session, &str, &[u8; 16])>,
    patch: fn(Vec<u8>) -> Vec<u8>,
) -> bool {
    let creds = match session {
        Some((_, identity, key)) => Credentials::Psk {
            identity: identity.as_bytes(),
            key,
        },
        None => Credentials::Psk {
            identity: b"nobody",
            key: &[1; 16],
        },
    };
    let mut rng = Seeded(seed);
    let mut c = match session {
        Some((session, _, _)) => Connection::resume(
            RustCrypto,
            AnyServer,
            Config::default(),
            &mut rng,
            creds,
            session,
            ms(now),
        ),
        None => Connection::connect(
            RustCrypto,
            AnyServer,
            Config::default(),
            &mut rng,
            creds,
            ms(now),
        ),
    }
    .unwrap();
    let mut buf = [0u8; 1500];
    let n = c.poll_transmit(ms(now), &mut buf).unwrap();
    let verify: Vec<_> = s
        .handle(now, vec![(addr, patch(buf[..n].to_vec()))])
        .into_iter()
        .filter(|(to, _)| *to == addr)
        .collect();
    assert_eq!(verify.len(), 1, "a HelloVerifyRequest");
    c.handle_datagram(ms(now), &verify[0].1).unwrap();
    let n = c.poll_transmit(ms(now), &mut buf).unwrap();
    s.handle(now, vec![(addr, patch(buf[..n].to_vec()))])
        .iter()
        .any(|(to, _)| *to == addr)
}

/// A ClientHello record without its extended_master_secret extension (type 23, empty), all
/// lengths fixed: one the handshake refuses (RFC 7627), whatever its cookie.
fn without_ems(mut d: Vec<u8>) -> Vec<u8> {
    // Record header 13, handshake header 12, then version 2, random 32.
    let mut i = 13 + 12 + 2 + 32;
    i += 1 + d[i] as usize; // session_id
    i += 1 + d[i] as usize; // cookie
    i += 2 + u16::from_be_bytes([d[i], d[i + 1]]) as usize; // cipher suites
    i += 1 + d[i] as usize; // compression methods
    let ext_len_at = i;
    let mut j = i + 2;
    while j + 4 <= d.len() {
        let ty = u16::from_be_bytes([d[j], d[j + 1]]);
        let len = u16::from_be_bytes([d[j + 2], d[j + 3]]) as usize;
        if ty == 23 {
            d.drain(j..j + 4 + len);
            let dec = |d: &mut Vec<u8>, at: usize, width: usize| {
                let mut v = 0usize;
                for k in 0..width {
                    v = (v << 8) | d[at + k] as usize;
                }
                v -= 4 + len;
                for k in 0..width {
                    d[at + width - 1 - k] = (v >> (8 * k)) as u8;
                }
            };
            dec(&mut d, ext_len_at, 2);
            dec(&mut d, 11, 2); // record length
            dec(&mut d, 14, 3); // handshake length
            dec(&mut d, 22, 3); // fragment length
            return d;
        }
        j += 4 + len;
    }
    panic!("no extended_master_secret in the ClientHello");
}

#[test]
fn a_client_hello_the_handshake_refuses_pushes_no_one_out() {
    // Eight hosts hold the whole table, each handshake old enough to give way (past the
    // 7 s shield, not yet at the 8 s crowded expiry). A ClientHello from a ninth host with a
    // valid cookie that the handshake then refuses (no extended_master_secret) must cost
    // none of them their slot: it is accepted (and refused) before anyone is pushed out.
    let mut s = Server::new(|c| c.max_handshakes = 8);
    for i in 0..8u8 {
        let addr = SocketAddr::from(([203, 0, 113, i], 4000));
        assert!(half_open(&mut s, addr, 0, u64::from(i), None, |d| d));
    }
    assert_eq!(s.layer.handshakes(), 8);
    let failed = s.count("dtls.handshake_failed");
    let refused = SocketAddr::from(([203, 0, 113, 50], 4000));
    half_open(&mut s, refused, 7_500, 77, None, without_ems);
    assert_eq!(s.count("dtls.handshake_failed"), failed + 1);
    assert_eq!(s.count("dtls.handshake_evicted"), 0);
    assert_eq!(s.layer.handshakes(), 8);
    // The same newcomer with a ClientHello the handshake takes gets in, pushing one out.
    assert!(half_open(&mut s, refused, 7_500, 78, None, |d| d));
    assert_eq!(s.count("dtls.handshake_evicted_oldest"), 1);
    assert_eq!(s.layer.handshakes(), 8);
}

#[test]
fn hosts_naming_a_sniffed_session_id_are_strangers_and_give_way_to_a_newcomer() {
    // An honest device completes a handshake; its session ID went out in clear in the
    // ServerHello. 256 other hosts fill the table with ClientHellos asking to resume it
    // (a resumption the cache holds, but made from another host) and then say nothing. (The
    // test makes their ClientHellos with the device's session; a ClientHello asking to resume
    // carries only the session ID, which anyone on the path has seen.)
    // Before, each counted as a peer that completed a handshake before: never pushed out,
    // never expired early, and a newcomer was refused until they went stale (30 s).
    let mut s = Server::new(|_| {});
    let key = [8; 16];
    let text = s.provision_psk(3, &key).to_string();
    let mut now = 0;
    let mut honest = Client::psk("10.9.0.1:40001".parse().unwrap(), &text, &key, 21, now);
    run(&mut s, &mut [&mut honest], &mut now, 100);
    assert!(honest.conn.is_established());
    let sniffed = honest.conn.session().expect("a resumable session");
    let start = now;
    for i in 0..256u32 {
        let addr = SocketAddr::from(([198, 18, (i / 256) as u8 + 1, (i % 256) as u8], 5000));
        assert!(half_open(
            &mut s,
            addr,
            now,
            1000 + u64::from(i),
            Some((&sniffed, &text, &key)),
            |d| d
        ));
    }
    assert_eq!(s.layer.handshakes(), 256);
    // A newcomer whose host holds none, once the strangers' shield (7 s) is over but
    // before the crowded expiry (8 s): the oldest of them gives way.
    let newcomer = SocketAddr::from(([10, 9, 0, 2], 40002));
    assert!(half_open(&mut s, newcomer, start + 7_500, 9, None, |d| d));
    assert_eq!(
        s.count("dtls.handshake_evicted_oldest"),
        1,
        "refused {} evicted {} started {} sessions {}",
        s.count("dtls.refused_tables_full"),
        s.count("dtls.handshake_evicted"),
        s.count("dtls.handshake_started"),
        s.layer.sessions()
    );
    assert_eq!(s.count("dtls.refused_tables_full"), 0);
    // The device itself, from its own host, may still resume (and counts as known).
    let mut again = Client::with(
        "10.9.0.1:40003".parse().unwrap(),
        Connection::resume(
            RustCrypto,
            AnyServer,
            Config::default(),
            &mut Seeded(22),
            Credentials::Psk {
                identity: text.as_bytes(),
                key: &key,
            },
            &sniffed,
            ms(start + 8_200),
        )
        .unwrap(),
    );
    let mut t = start + 8_200;
    run(&mut s, &mut [&mut again], &mut t, 100);
    assert!(again.conn.is_established() && again.conn.resumed());
}

#[test]
fn an_honest_handshake_that_loses_a_flight_completes_while_300_hosts_churn() {
    // The honest device starts first; its server flight is lost and so is its own first
    // retransmission (1 s later), so its handshake makes no progress until its second
    // retransmission at 3 s. Meanwhile 300 hosts churn ClientHellos (each host one
    // half-open handshake at a time, a new one every half second from a new port): more
    // hosts than slots, so those holding none push out others all the time. Before, any
    // stranger's handshake 2 s old could go, oldest first: the honest one was pushed out
    // and had to start over. Now it is safe for 7 s after its last progress.
    let mut s = Server::new(|_| {});
    let key = [9; 16];
    let text = s.provision_psk(4, &key).to_string();
    let mut honest = Client::psk("10.8.0.1:40001".parse().unwrap(), &text, &key, 31, 0);
    let mut sends = 0;
    let mut churn_started = 0u64;
    let mut next_port = 6000u16;
    let mut now = 0u64;
    while now <= 10_000 {
        // The honest client: its datagrams out (the third, its first retransmission, is
        // lost), the server's answers back (lost until its fourth is delivered).
        for (to, d) in honest.outgoing(now) {
            sends += 1;
            if sends == 3 {
                continue;
            }
            for (back, r) in s.handle(now, vec![(to, d)]) {
                if back == honest.addr && (sends == 1 || sends >= 4) {
                    honest.incoming(now, &r);
                }
            }
        }
        for (back, r) in s.handle(now, vec![]) {
            if back == honest.addr && sends >= 4 {
                honest.incoming(now, &r);
            }
        }
        if now >= 10 && now % 500 == 10 {
            for h in 0..300u32 {
                let addr =
                    SocketAddr::from(([198, 19, (h / 256) as u8, (h % 256) as u8], next_port));
                if half_open(&mut s, addr, now, u64::from(h) << 20 | now, None, |d| d) {
                    churn_started += 1;
                }
            }
            next_port += 1;
        }
        now += 10;
    }
    assert!(
        honest.conn.is_established(),
        "the honest handshake completed"
    );
    assert!(sends >= 4, "its flight was lost and retransmitted");
    // The honest handshake was never pushed out: the server started exactly one handshake
    // for it besides the churn's...
    assert_eq!(
        s.count("dtls.handshake_started"),
        churn_started + 1,
        "evicted {}",
        s.count("dtls.handshake_evicted")
    );
    assert_eq!(s.count("dtls.handshake_restarted"), 0);
    // ...while the churn turned the table over as fast as the eviction budget allows.
    assert!(
        s.count("dtls.handshake_evicted") >= 16,
        "{}",
        s.count("dtls.handshake_evicted")
    );
    assert!(s.count("dtls.refused_eviction_budget") > 0);
    // Turnover stays within the eviction budget: 256 per 30 s and a reserve of 16.
    assert!(
        s.count("dtls.handshake_evicted") <= 16 + 256 * 10 / 30 + 1,
        "{}",
        s.count("dtls.handshake_evicted")
    );
}

#[test]
fn a_host_whose_handshake_was_pushed_out_takes_only_free_slots() {
    // Eight hosts hold the whole table. A ninth pushes one of them out once its handshake
    // went 7 s without progress. The host pushed out (its handshake never finished) may not
    // push out another in turn within the handshake timeout: before, every host holding none
    // could, so hosts that never finish kept pushing out each other and newcomers alike.
    let mut s = Server::new(|c| c.max_handshakes = 8);
    let hosts: Vec<SocketAddr> = (0..8u8)
        .map(|i| SocketAddr::from(([203, 0, 113, i], 4000)))
        .collect();
    for (i, a) in hosts.iter().enumerate() {
        assert!(half_open(&mut s, *a, 0, i as u64, None, |d| d));
    }
    let ninth = SocketAddr::from(([203, 0, 113, 50], 4000));
    assert!(half_open(&mut s, ninth, 7_100, 50, None, |d| d));
    assert_eq!(s.count("dtls.handshake_evicted_oldest"), 1);
    let gone = *hosts
        .iter()
        .find(|a| s.layer.handshake_budget().held_by(Host::of(**a)) == 0)
        .expect("one gave way");
    let refused = s.count("dtls.refused_tables_full");
    let again = SocketAddr::new(gone.ip(), 4001);
    assert!(!half_open(&mut s, again, 7_200, 51, None, |d| d));
    assert_eq!(s.count("dtls.refused_tables_full"), refused + 1);
    assert_eq!(s.count("dtls.handshake_evicted"), 1);
    // A fresh host still gets in.
    let tenth = SocketAddr::from(([203, 0, 113, 60], 4000));
    assert!(half_open(&mut s, tenth, 7_300, 60, None, |d| d));
    assert_eq!(s.count("dtls.handshake_evicted_oldest"), 2);
}

#[test]
fn a_newcomer_from_a_host_with_a_live_session_gets_in_when_strangers_spent_the_budget() {
    // A device behind a host that already holds an authenticated session (the other devices of
    // one border router or NAT) is vouched for: its handshake may push out a stranger's even
    // when the host's own last handshake was pushed out (a suspect otherwise) and strangers
    // have spent the budget of evictions. Before, such a newcomer got 5.03 until the
    // strangers' first tries were over (the soak's carrier newcomer, ten minutes at most).
    let mut s = Server::new(|c| c.max_handshakes = 8);
    let key = [7; 16];
    let text = s.provision_psk(3, &key).to_string();
    let router = [198, 51, 100, 7];
    let mut now = 0;
    let mut first = Client::psk(SocketAddr::from((router, 5000)), &text, &key, 90, now);
    run(&mut s, &mut [&mut first], &mut now, 200);
    assert!(first.conn.is_established());
    // Strangers fill the table, then push each other out until the budget is spent.
    let t0 = now + 100;
    for i in 0..8u8 {
        assert!(half_open(
            &mut s,
            SocketAddr::from(([203, 0, 113, i], 4000)),
            t0,
            u64::from(i),
            None,
            |d| d
        ));
    }
    let mut t = t0 + 7_100;
    let mut i = 0u8;
    while s.count("dtls.refused_eviction_budget") == 0 {
        let _ = half_open(
            &mut s,
            SocketAddr::from(([203, 0, 114, i], 4000)),
            t,
            1000 + u64::from(i),
            None,
            |d| d,
        );
        i = i
            .checked_add(1)
            .expect("the budget is spent before 256 strangers");
        t += 10;
    }
    // A stranger from a new host is refused now; the router's new device gets in.
    let evicted = s.count("dtls.handshake_evicted");
    assert!(!half_open(
        &mut s,
        SocketAddr::from(([203, 0, 115, 1], 4000)),
        t,
        5000,
        None,
        |d| d
    ));
    assert!(half_open(
        &mut s,
        SocketAddr::from((router, 5001)),
        t,
        5001,
        None,
        |d| d
    ));
    assert_eq!(s.count("dtls.handshake_evicted"), evicted + 1);
}
