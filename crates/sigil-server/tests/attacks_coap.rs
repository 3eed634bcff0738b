//! Attacks on the coap:// message layer with plain CoAP datagrams, in memory against the real
//! `Dispatcher` (issue 12, attacks 4, 5 and 6). Every figure asserted is the server's own
//! accounting (the `mem.<table>.*` gauges and the counters), never memory or timings.
//!
//! 4. One host floods the dedup cache with Confirmable GETs whose answers are ~1 KiB.
//! 5. A spoofed small request would reflect a large answer (RFC 9175 §2.4).
//! 6. One host with 256 source ports starts Block1 transfers to hold every slot.

use sigil_coap::{option, BlockOption, Code, Message, MessageBuilder, MessageType};
use sigil_device::DeviceConfig;
use sigil_server::budget::Caps;
use sigil_server::Store;
use sigil_time::Instant;
use std::net::SocketAddr;

use common::sensor::{registered, sensor_with_history, Sensor};
use common::Plain as Server;
use sigil_testkit::server as common;

fn addr(ip: [u8; 4], port: u16) -> SocketAddr {
    SocketAddr::from((ip, port))
}

/// A Confirmable GET of `path` (with `?query`), with an Echo option if given.
fn get(mid: u16, token: &[u8], path: &str, echo: Option<&[u8]>) -> Vec<u8> {
    let (p, q) = path.split_once('?').unwrap_or((path, ""));
    let mut buf = [0u8; 256];
    let mut b =
        MessageBuilder::new(&mut buf, MessageType::Confirmable, Code::GET, mid, token).unwrap();
    b.uri_path(p).unwrap();
    for q in q.split('&').filter(|s| !s.is_empty()) {
        b.option(option::URI_QUERY, q.as_bytes()).unwrap();
    }
    if let Some(e) = echo {
        b.option(option::ECHO, e).unwrap();
    }
    let n = b.finish();
    buf[..n].to_vec()
}

/// The Echo value of a 4.01 answer.
fn echo_of(answer: &[u8]) -> Vec<u8> {
    let m = Message::parse(answer).unwrap();
    assert_eq!(m.code, Code::UNAUTHORIZED);
    m.option(option::ECHO).expect("4.01 carries Echo").to_vec()
}

#[test]
fn attack_4_a_dedup_flood_is_held_to_the_hosts_share_and_given_back() {
    let caps = Caps {
        total: 1 << 20,
        per_host: 128 << 10,
    };
    let mut s = Server::new(|c| c.dedup_caps = caps);
    let mut dev = sensor_with_history(&mut s, 20);
    // The device's own exchanges never meet the amplification limit.
    assert_eq!(s.stats.get("coap.amplification.limited"), 0);
    let base = s.gauge("mem.dedup.bytes");
    let history = format!("{}?n=100", dev.topic());

    // The attacker shows it receives at its address (Echo), then floods.
    let attacker = addr([10, 0, 0, 66], 7000);
    let first = s.one(attacker, get(1, &[1, 2], &history, None));
    let echo = echo_of(&first[0]);
    let mut mid = 2u16;
    for _ in 0..8 {
        let batch = (0..250)
            .map(|_| {
                mid += 1;
                (attacker, get(mid, &[1, 2], &history, Some(&echo)))
            })
            .collect();
        let answers = s.deliver(batch);
        assert_eq!(answers.len(), 250);
        assert!(
            answers.iter().all(|(_, a)| a.len() > 1024),
            "each answer is ~1 KiB"
        );
        let held = s.gauge("mem.dedup.bytes");
        assert!(held > base, "the cache's bytes are accounted");
        assert!(
            held - base <= caps.per_host as u64,
            "{held} bytes, {base} the device's"
        );
    }
    assert!(s.gauge("mem.dedup.peak") - base <= caps.per_host as u64);
    assert!(s.stats.get("coap.dedup.not_remembered") >= 1500);

    // An honest host's retransmission is still deduplicated: the reading is stored once and
    // the same answer comes back.
    let before = s.stats.get("coap.duplicate");
    dev.publish(&mut s, 99.0);
    let put = dev.sent.last().unwrap().clone();
    let stored = Store::open(&s.db).unwrap().reading_count().unwrap();
    let again = s.one(dev.addr, put);
    assert_eq!(s.stats.get("coap.duplicate"), before + 1);
    assert_eq!(Message::parse(&again[0]).unwrap().code, Code::CHANGED);
    assert_eq!(Store::open(&s.db).unwrap().reading_count().unwrap(), stored);

    // Many hosts together reach the total, never more.
    for h in 0..30u8 {
        let from = addr([10, 0, 1, h], 7000);
        let e = echo_of(&s.one(from, get(1, &[3], &history, None))[0]);
        let batch = (0..150u16)
            .map(|i| (from, get(10 + i, &[3], &history, Some(&e))))
            .collect();
        s.deliver(batch);
        assert!(s.gauge("mem.dedup.bytes") <= caps.total as u64);
    }
    assert!(s.gauge("mem.dedup.bytes") > (caps.total / 2) as u64);
    assert!(s.gauge("mem.dedup.peak") <= caps.total as u64);
    assert_eq!(s.gauge("mem.dedup.cap"), caps.total as u64);
    let slots = s.gauge("mem.dedup.slots");
    assert!(slots >= 512, "{slots}");

    // After EXCHANGE_LIFETIME everything is given back, the map's allocation too.
    s.now += s.config.transmission.exchange_lifetime().as_millis() as u64 + 1;
    s.d.handle_timeout(Instant::from_millis(s.now));
    assert_eq!(s.gauge("mem.dedup.bytes"), 0);
    assert_eq!(s.gauge("mem.dedup.hosts"), 0);
    assert!(
        s.gauge("mem.dedup.slots") * 4 < slots,
        "{} of {slots}",
        s.gauge("mem.dedup.slots")
    );
}

#[test]
fn attack_5_small_unverified_requests_get_at_most_three_times_their_size() {
    let mut s = Server::new(|_| {});
    let dev = sensor_with_history(&mut s, 20);
    // Enough topics for /ps to be larger than three requests carrying an Echo.
    for seed in 2..8 {
        registered(&mut s, seed);
    }
    let paths = [
        format!("{}?n=100", dev.topic()),
        "rd-lookup/res".into(),
        "ps".into(),
    ];
    for (i, path) in paths.iter().enumerate() {
        let port = 9000 + 10 * i as u16;
        let from = addr([10, 0, 0, 5], port);
        let req = get(1, &[7], path, None);
        let answers = s.one(from, req.clone());
        assert_eq!(answers.len(), 1);
        assert!(
            answers[0].len() <= 3 * req.len(),
            "{path}: {} for {}",
            answers[0].len(),
            req.len()
        );
        let echo = echo_of(&answers[0]);

        // Repeated with the Echo: the full answer.
        let full = s.one(from, get(2, &[7], path, Some(&echo)));
        let m = Message::parse(&full[0]).unwrap();
        assert_eq!(m.code, Code::CONTENT, "{path}");
        assert!(
            full[0].len() > 3 * req.len(),
            "{path}: {} bytes",
            full[0].len()
        );

        // A wrong Echo, an Echo issued to another port, an expired Echo: refused (4.01).
        let mut wrong = echo.clone();
        wrong[11] ^= 1;
        let other = addr([10, 0, 0, 5], port + 1);
        let a = s.one(other, get(3, &[7], path, Some(&wrong)));
        assert_eq!(
            Message::parse(&a[0]).unwrap().code,
            Code::UNAUTHORIZED,
            "{path}"
        );
        let a = s.one(other, get(4, &[7], path, Some(&echo)));
        assert_eq!(
            Message::parse(&a[0]).unwrap().code,
            Code::UNAUTHORIZED,
            "{path}"
        );
        let late = addr([10, 0, 0, 5], port + 2);
        let old = echo_of(&s.one(late, get(5, &[7], path, None))[0]);
        s.now += 301_000;
        let a = s.one(late, get(6, &[7], path, Some(&old)));
        assert_eq!(
            Message::parse(&a[0]).unwrap().code,
            Code::UNAUTHORIZED,
            "{path}"
        );
    }
    assert!(s.stats.get("coap.echo.invalid") >= 9);
    assert!(s.stats.get("coap.echo.accepted") >= 3);
}

#[test]
fn attack_5_a_short_duplicate_does_not_replay_a_large_cached_answer() {
    // No room to remember verified addresses: each large answer needs its own Echo.
    let mut s = Server::new(|c| {
        c.verified_caps = Caps {
            total: 0,
            per_host: 0,
        }
    });
    let dev = sensor_with_history(&mut s, 20);
    let path = format!("{}?n=100", dev.topic());
    let victim = addr([10, 0, 0, 9], 5683);
    let echo = echo_of(&s.one(victim, get(500, &[9, 9], &path, None))[0]);
    let req = get(501, &[9, 9], &path, Some(&echo));
    let big = s.one(victim, req.clone());
    assert_eq!(Message::parse(&big[0]).unwrap().code, Code::CONTENT);
    // The client's own retransmission gets the same answer (RFC 7252 §4.5).
    assert_eq!(s.one(victim, req), big);
    // A short datagram with the victim's address and that message ID does not.
    for dup in [
        vec![0x40, 0x01, 0x01, 0xf5],
        vec![0x42, 0x01, 0x01, 0xf5, 9, 9],
        get(501, &[9, 9], "x", None),
    ] {
        for a in s.one(victim, dup.clone()) {
            assert!(
                a.len() <= 3 * dup.len(),
                "{} bytes for {}",
                a.len(),
                dup.len()
            );
            assert_ne!(Message::parse(&a).unwrap().code, Code::CONTENT);
        }
    }
    assert!(s.stats.get("coap.amplification.limited") >= 3);
}

#[test]
fn attack_6_one_host_with_256_ports_cannot_hold_every_block1_slot() {
    let mut s = Server::new(|_| {});
    let caps = s.config.block1_caps;
    let attacker = [10, 0, 0, 66];
    let mut refused = 0;
    for port in 30_000..30_256u16 {
        let batch = (0..4u16)
            .map(|k| {
                let mut buf = [0u8; 1200];
                let mut b = MessageBuilder::new(
                    &mut buf,
                    MessageType::Confirmable,
                    Code::POST,
                    k,
                    &[k as u8],
                )
                .unwrap();
                b.uri_path("rd").unwrap();
                b.option(option::URI_QUERY, format!("ep={port}-{k}").as_bytes())
                    .unwrap();
                let (v, n) = BlockOption::new(0, true, 6).encode().unwrap();
                b.option(option::BLOCK1, &v[..n]).unwrap();
                let n = b.finish_with_payload(&[b'x'; 1024]).unwrap();
                (addr(attacker, port), buf[..n].to_vec())
            })
            .collect();
        for (_, a) in s.deliver(batch) {
            if Message::parse(&a).unwrap().code == Code::SERVICE_UNAVAILABLE {
                refused += 1;
            }
        }
        assert!(s.gauge("mem.block1.bytes") <= caps.per_host as u64);
    }
    assert!(refused > 900, "{refused} of 1024 refused");
    assert_eq!(s.stats.get("coap.block1.refused"), refused);
    assert!(s.gauge("mem.block1.peak") <= caps.per_host as u64);

    // Meanwhile a kit registers block-wise from another host.
    let keys = s.provision_kit(100);
    let config = DeviceConfig {
        block_szx: 2,
        ..Default::default()
    };
    let mut member = Sensor::new(100, addr([192, 0, 2, 7], 41000), config, &keys[1..]);
    member.step(&mut s, 10);
    assert!(member.device.is_registered(), "{:?}", member.events);
    assert!(s.stats.get("coap.block1_continue") > 0);
    assert!(s.gauge("mem.block1.bytes") <= caps.total as u64);
}

/// 256 hosts (10.1.x.y), no address of which any honest peer uses.
fn many_hosts() -> impl Iterator<Item = [u8; 4]> {
    (0..256u16).map(|i| [10, 1, (i / 200) as u8, 1 + (i % 200) as u8])
}

/// The dedup cache against 256 hosts (issue 25): each host verifies its address by Echo and
/// then sends Confirmable GETs of a ~1 KiB answer, far more in all than the total holds. The
/// total is never exceeded. A newcomer device that registers and publishes while the cache is
/// full gets its exchanges remembered all the same: the oldest entries of hosts holding more
/// give way (`coap.dedup.gave_way`), so its retransmissions are answered from the cache.
/// Before, its exchanges were not remembered, and the retransmission of its registration
/// (whose ACK was lost) was handled again and refused 4.01 "stale sq": a device told its
/// registration failed because strangers filled a table.
#[test]
fn many_hosts_fill_the_dedup_total_and_a_newcomers_exchanges_are_still_remembered() {
    let caps = Caps {
        total: 1 << 20,
        per_host: 64 << 10,
    };
    let mut s = Server::new(|c| c.dedup_caps = caps);
    let dev = sensor_with_history(&mut s, 20);
    let history = format!("{}?n=100", dev.topic());
    let base_remembered = s.stats.get("coap.dedup.not_remembered");
    // One host every 100 ms: 25.6 s in all, so the give-way rate (200 a second) is not
    // what limits the hosts that come late.
    for (h, host) in many_hosts().enumerate() {
        s.now += 100;
        let from = addr(host, 7000);
        let e = echo_of(&s.one(from, get(1, &[9], &history, None))[0]);
        let batch = (0..12u16)
            .map(|i| (from, get(10 + i, &[9], &history, Some(&e))))
            .collect();
        let answers = s.deliver(batch);
        assert!(answers.iter().all(|(_, a)| a.len() > 1024), "host {h}");
        assert!(s.gauge("mem.dedup.bytes") <= caps.total as u64);
    }
    assert!(
        s.gauge("mem.dedup.bytes") > (caps.total as u64) * 9 / 10,
        "the hosts filled the total: {}",
        s.gauge("mem.dedup.bytes")
    );
    assert!(s.gauge("mem.dedup.peak") <= caps.total as u64);
    // Hosts that came late pushed out earlier ones' entries (they held more), or were not
    // remembered where that would have made them hold more than the others.
    let gave_way = s.stats.get("coap.dedup.gave_way");
    assert!(gave_way > 0);
    // Without give-way the first ~70 hosts (12 answers of > 1 KiB each) would hold it all.
    let hosts = s.gauge("mem.dedup.hosts");
    assert!(
        hosts > (caps.total / (12 * 1100)) as u64,
        "{hosts} hosts share the table"
    );
    assert!(s.stats.get("coap.dedup.not_remembered") > base_remembered);

    // A flood of small requests from 10,000 spoofed addresses at once pushes out no more
    // entries than the give-way rate allows (200 a second, as many at once).
    s.now += 1_000;
    let before = s.stats.get("coap.dedup.gave_way");
    let flood = (0..10_000u32)
        .map(|i| {
            let from = addr([10, 2, (i >> 8) as u8, i as u8], 9000);
            (from, get(1, &[1], ".well-known/core", None))
        })
        .collect();
    s.deliver(flood);
    let pushed = s.stats.get("coap.dedup.gave_way") - before;
    assert!(pushed <= 200, "{pushed} entries pushed out by one flood");
    assert!(s.stats.get("coap.dedup.give_way_rate_limited") > 0);

    // A newcomer registers and publishes a second later; each of its Confirmables arrives
    // twice (its ACK lost), and the second copy is answered from the cache.
    s.now += 1_000;
    let duplicates = s.stats.get("coap.duplicate");
    let mut newcomer = registered(&mut s, 7);
    let registration = newcomer.sent.last().unwrap().clone();
    let first = Message::parse(&newcomer_answer(&mut s, &newcomer, registration.clone()))
        .unwrap()
        .code;
    assert!(
        first.is_success(),
        "{first:?}; not remembered {}, gave way {}, bytes {}",
        s.stats.get("coap.dedup.not_remembered"),
        s.stats.get("coap.dedup.gave_way"),
        s.gauge("mem.dedup.bytes")
    );
    assert_eq!(s.stats.get("coap.duplicate"), duplicates + 1);
    newcomer.publish(&mut s, 21.5);
    let put = newcomer.sent.last().unwrap().clone();
    let stored = Store::open(&s.db).unwrap().reading_count().unwrap();
    let again = Message::parse(&newcomer_answer(&mut s, &newcomer, put))
        .unwrap()
        .code;
    assert_eq!(again, Code::CHANGED);
    assert_eq!(s.stats.get("coap.duplicate"), duplicates + 2);
    assert_eq!(
        Store::open(&s.db).unwrap().reading_count().unwrap(),
        stored,
        "the reading is stored once"
    );
    assert!(s.gauge("mem.dedup.bytes") <= caps.total as u64);

    // All of it is given back after EXCHANGE_LIFETIME.
    s.now += s.config.transmission.exchange_lifetime().as_millis() as u64 + 1;
    s.d.handle_timeout(Instant::from_millis(s.now));
    assert_eq!(s.gauge("mem.dedup.bytes"), 0);
    assert_eq!(s.gauge("mem.dedup.hosts"), 0);
}

/// `sensor`'s `datagram` delivered again; the one answer.
fn newcomer_answer(s: &mut Server, sensor: &Sensor, datagram: Vec<u8>) -> Vec<u8> {
    let mut a = s.one(sensor.addr, datagram);
    assert_eq!(a.len(), 1);
    a.remove(0)
}

/// The table of Echo-verified addresses against 256 hosts (issue 25): each host verifies 8
/// addresses (ports), more in all than the table holds. The total is never exceeded, and a
/// newcomer reader at a new address still gets its large answer by sending the Echo value
/// with its request each time (RFC 9175 §2.4): it is answered, only not remembered.
#[test]
fn many_hosts_fill_the_verified_address_table_and_a_newcomer_still_gets_large_answers() {
    let caps = Caps {
        total: 64 << 10,
        per_host: 16 << 10,
    };
    let mut s = Server::new(|c| c.verified_caps = caps);
    let dev = sensor_with_history(&mut s, 20);
    let history = format!("{}?n=100", dev.topic());
    for host in many_hosts() {
        for port in 7000..7008u16 {
            let from = addr(host, port);
            let e = echo_of(&s.one(from, get(1, &[5], &history, None))[0]);
            let a = s.one(from, get(2, &[5], &history, Some(&e)));
            assert!(a[0].len() > 1024, "an address that echoes gets the answer");
        }
        assert!(s.gauge("mem.verified.bytes") <= caps.total as u64);
    }
    assert!(
        s.gauge("mem.verified.bytes") + 256 > caps.total as u64,
        "the hosts filled the table: {}",
        s.gauge("mem.verified.bytes")
    );
    assert!(s.stats.get("coap.echo.not_remembered") > 1000);

    // The newcomer: its first request is answered 4.01 with Echo, its repetition with the
    // value gets the whole answer, and so does every later request that carries it.
    let newcomer = addr([127, 0, 0, 1], 41_000);
    let e = echo_of(&s.one(newcomer, get(1, &[6], &history, None))[0]);
    for mid in 2..6u16 {
        let a = s.one(newcomer, get(mid, &[6], &history, Some(&e)));
        let m = Message::parse(&a[0]).unwrap();
        assert_eq!(m.code, Code::CONTENT);
        assert!(a[0].len() > 1024);
    }
    // Without the value it is still an unverified address (the table had no room for it).
    echo_of(&s.one(newcomer, get(9, &[6], &history, None))[0]);

    // After ECHO_LIFETIME_S the table is given back.
    s.now += sigil_server::echo::ECHO_LIFETIME_S * 1000 + 1;
    s.d.handle_timeout(Instant::from_millis(s.now));
    assert_eq!(s.gauge("mem.verified.bytes"), 0);
}

/// A coaps:// device beside a flood of spoofed plain coap:// requests that fills the dedup
/// table and spends its give-way rate: a session cannot be spoofed, so its exchanges are not
/// held to that rate and are still remembered (its retransmission is answered from the
/// cache). Before, the spoofed flood spent the rate they shared, and a coaps:// device's
/// retransmitted registration was handled again and refused 4.01 `stale sq`.
#[test]
fn a_spoofed_flood_does_not_spend_what_coaps_exchanges_need_to_be_remembered() {
    let mut s = common::Secure::new(|_| {});
    let id = common::ed25519_identity(61);
    s.provision(&id, Some(&[61; 16]));
    let cap = {
        s.d.handle_timeout(common::ms(0));
        s.stats.get("mem.dedup.cap")
    };
    // The device's session first.
    let mut c = common::Client::psk(common::addr(61), &id.to_string(), &[61; 16], 61, 0);
    let mut now = 0;
    common::run(&mut s, &mut [&mut c], &mut now, 300);
    assert!(c.conn.is_established());
    // Spoofed GETs (one per address) until the table is full, then a flood beyond it, all
    // at one instant.
    let mut i = 0u32;
    let spoofed = |i: u32| {
        let from = SocketAddr::from(([10, 4, (i >> 16) as u8, (i >> 8) as u8], i as u16));
        (from, common::coap_get(".well-known/core", 1))
    };
    while s.stats.get("mem.dedup.bytes") + 1_024 < cap {
        let batch = (i..i + 512).map(spoofed).collect();
        i += 512;
        s.d.handle_at(batch, common::ms(now), common::wall(now));
        s.d.handle_timeout(common::ms(now));
    }
    let batch = (i..i + 512).map(spoofed).collect();
    s.d.handle_at(batch, common::ms(now), common::wall(now));
    assert!(
        s.stats.get("coap.dedup.give_way_rate_limited") > 0,
        "the rate is spent"
    );

    // One request of the device sent twice at that instant (its answer lost the first time).
    let t = now;
    let get = common::coap_get(".well-known/core", 77);
    let duplicates = s.stats.get("coap.duplicate");
    c.send(&get);
    common::step(&mut s, &mut [&mut c], t);
    c.send(&get);
    common::step(&mut s, &mut [&mut c], t);
    assert_eq!(
        s.stats.get("coap.duplicate"),
        duplicates + 1,
        "the retransmission is answered from the cache"
    );
    assert!(s.stats.get("mem.dedup.bytes") <= cap);
}

/// A registration's retransmission that no dedup cache kept (a full table, a flood spending
/// its give-way rate, a host over its share) is answered as the registration was: 2.01 with
/// the same location, changing nothing (`register.repeat_answered`). Before, it was handled
/// again and refused 4.01 `stale sq`, so a device behind a lossy link never registered while
/// a cheap flood kept the table full. Only the same request from the same address within
/// EXCHANGE_LIFETIME counts as a repeat: from another address, or later, it is stale.
#[test]
fn a_registration_repeated_without_the_dedup_cache_gets_its_answer_again() {
    let nothing = Caps {
        total: 0,
        per_host: 0,
    };
    let mut s = Server::new(|c| c.dedup_caps = nothing);
    let dev = registered(&mut s, 9);
    let registration = dev.sent.last().unwrap().clone();
    let location = |a: &[u8]| {
        let m = Message::parse(a).unwrap();
        let path: Vec<String> = m
            .option_values(option::LOCATION_PATH)
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .collect();
        (m.code, path.join("/"))
    };
    let registered_at = dev.device.location().unwrap().to_string();
    let again = s.one(dev.addr, registration.clone());
    assert_eq!(
        location(&again[0]),
        (
            Code::CREATED,
            registered_at.trim_start_matches('/').to_string()
        )
    );
    assert_eq!(s.stats.get("register.repeat_answered"), 1);
    assert_eq!(s.stats.get("coap.duplicate"), 0, "nothing was remembered");
    assert_eq!(
        Store::open(&s.db).unwrap().registrations().unwrap().len(),
        1
    );
    // From another address: stale.
    let other = s.one(addr([127, 0, 0, 1], 39_999), registration.clone());
    assert_eq!(Message::parse(&other[0]).unwrap().code, Code::UNAUTHORIZED);
    // After EXCHANGE_LIFETIME: stale.
    s.now += 248_000;
    let late = s.one(dev.addr, registration);
    assert_eq!(Message::parse(&late[0]).unwrap().code, Code::UNAUTHORIZED);
    assert_eq!(s.stats.get("register.repeat_answered"), 1);
}
