//! `sigil diet` over loopback UDP with real processes: three trusted nodes find each other
//! from their neighbour lists, run the three phases and exchange encrypted, signed messages.
//! The link between A and B runs through a relay in this test that replays one message and
//! tampers with another; a fourth node whose identity nobody listed says hello to C. Then a
//! node's recorded hellos and messages are replayed at its neighbour from 256 loopback
//! addresses beside an honest newcomer.

use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SIGIL: &str = env!("CARGO_BIN_EXE_sigil");

fn free_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn identity(state: &Path) -> String {
    let out = Command::new(SIGIL)
        .args(["diet", "--print-identity", "--state"])
        .arg(state)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn events(out: &std::process::Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("not JSON: {l}")))
        .collect()
}

/// Relays datagrams between `a` (reaching us at `sa`) and `b` (reaching us at `sb`) until
/// `until`. A's second message to B is replayed after delivery; its fourth is tampered with
/// instead of delivered.
fn relay(sa: UdpSocket, sb: UdpSocket, a: SocketAddr, b: SocketAddr, until: Instant) -> (u32, u32) {
    sa.set_read_timeout(Some(Duration::from_millis(10)))
        .unwrap();
    sb.set_read_timeout(Some(Duration::from_millis(10)))
        .unwrap();
    let (mut data_from_a, mut replayed, mut tampered) = (0, 0, 0);
    let mut buf = [0u8; 2048];
    while Instant::now() < until {
        if let Ok((n, _)) = sa.recv_from(&mut buf) {
            let d = &mut buf[..n];
            if d[0] == 0x02 {
                data_from_a += 1;
                if data_from_a == 4 {
                    d[n / 2] ^= 0x40;
                    tampered += 1;
                }
            }
            sb.send_to(d, b).unwrap();
            if d[0] == 0x02 && data_from_a == 2 {
                sb.send_to(d, b).unwrap();
                replayed += 1;
            }
        }
        if let Ok((n, _)) = sb.recv_from(&mut buf) {
            sa.send_to(&buf[..n], a).unwrap();
        }
    }
    (replayed, tampered)
}

#[test]
fn three_nodes_talk_and_refuse_replays_tampering_and_strangers() {
    let dir = tempfile::tempdir().unwrap();
    let names = ["a", "b", "c", "stranger"];
    let ids: Vec<String> = names
        .iter()
        .map(|n| identity(&dir.path().join(n)))
        .collect();
    // The stranger's key exists, but nobody lists it.
    let trust = dir.path().join("trust.txt");
    std::fs::write(
        &trust,
        format!("# the three nodes\n{}\n{}\n{}\n", ids[0], ids[1], ids[2]),
    )
    .unwrap();
    let port: Vec<u16> = (0..4).map(|_| free_port()).collect();
    let relay_a = UdpSocket::bind("127.0.0.1:0").unwrap(); // A's view of B
    let relay_b = UdpSocket::bind("127.0.0.1:0").unwrap(); // B's view of A
    let ra = relay_a.local_addr().unwrap();
    let rb = relay_b.local_addr().unwrap();
    let addr = |i: usize| format!("127.0.0.1:{}", port[i]);
    let neighbours: [Vec<String>; 4] = [
        vec![
            format!("{ra}={}", ids[1]),
            format!("{}={}", addr(2), ids[2]),
        ],
        vec![
            format!("{rb}={}", ids[0]),
            format!("{}={}", addr(2), ids[2]),
        ],
        vec![
            format!("{}={}", addr(0), ids[0]),
            format!("{}={}", addr(1), ids[1]),
        ],
        vec![format!("{}={}", addr(2), ids[2])],
    ];
    let run_for = Duration::from_secs(5);
    let children: Vec<_> = (0..4)
        .map(|i| {
            let mut c = Command::new(SIGIL);
            c.args([
                "diet",
                "--json",
                "--interval",
                "400ms",
                "--hello-timeout",
                "300ms",
            ])
            .args(["--duration", "5s", "--listen", &addr(i), "--trust"])
            .arg(&trust)
            .arg("--state")
            .arg(dir.path().join(names[i]))
            .args(["--message", &format!("from {} #{{n}}", names[i])]);
            for n in &neighbours[i] {
                c.args(["--neighbour", n]);
            }
            c.stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let (replayed, tampered) = relay(
        relay_a,
        relay_b,
        addr(0).parse().unwrap(),
        addr(1).parse().unwrap(),
        Instant::now() + run_for + Duration::from_millis(500),
    );
    assert_eq!(
        (replayed, tampered),
        (1, 1),
        "the relay saw too few messages"
    );
    let outs: Vec<_> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    let ev: Vec<Vec<serde_json::Value>> = outs.iter().map(events).collect();
    let summary = |i: usize| {
        ev[i]
            .iter()
            .find(|e| e["event"] == "summary")
            .unwrap()
            .clone()
    };
    let texts = |i: usize, from: &str| {
        ev[i]
            .iter()
            .filter(|e| e["event"] == "message" && e["text"].as_str().unwrap().starts_with(from))
            .count()
    };
    for i in 0..3 {
        assert!(
            outs[i].status.success(),
            "{}",
            String::from_utf8_lossy(&outs[i].stderr)
        );
        assert_eq!(
            summary(i)["established"],
            2,
            "node {}: {:?}",
            names[i],
            ev[i]
        );
        for (j, from) in ["from a", "from b", "from c"].iter().enumerate() {
            if j != i {
                assert!(
                    texts(i, from) >= 3,
                    "node {} heard {} '{from}' messages",
                    names[i],
                    texts(i, from)
                );
            }
        }
    }
    // Messages carry the sender's identity as the receiver verified it.
    let from_c = ev[0]
        .iter()
        .find(|e| e["event"] == "message" && e["from"] == addr(2))
        .unwrap();
    assert_eq!(from_c["identity"], ids[2].as_str());
    // B refused the replay and the tampered message, C the stranger's hellos.
    let b = summary(1)["refused"].clone();
    assert_eq!(b["replay"], 1, "{b}");
    assert_eq!(
        b["bad_tag"].as_u64().unwrap() + b["bad_signature"].as_u64().unwrap(),
        1,
        "{b}"
    );
    let c = summary(2)["refused"].clone();
    assert!(c["untrusted"].as_u64().unwrap() >= 1, "{c}");
    assert_eq!(summary(3)["established"], 0);
    for (i, name) in names.iter().enumerate().take(3) {
        let r = &summary(i)["refused"];
        let other: u64 = [
            "malformed",
            "reflected",
            "no_session",
            "stale_hello",
            "table_full",
            "other",
        ]
        .iter()
        .map(|k| r[k].as_u64().unwrap())
        .sum();
        assert_eq!(other, 0, "node {name}: {r}");
    }
    // Each start raises the epoch.
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a/diet-epoch"))
            .unwrap()
            .trim(),
        "1"
    );
}

#[test]
fn arguments_are_checked_before_any_state_is_made() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("node");
    for args in [
        &["--neighbour", "127.0.0.1:1=not-an-identity"][..],
        &["--neighbour", "nowhere=00112233445566778899aabbccddeeff"],
        &["--neighbour", "127.0.0.1:1=p256:0011"],
        &[
            "--neighbour",
            "127.0.0.1:1=ed25519:d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
        ],
        &[
            "--listen",
            "here",
            "--neighbour",
            "127.0.0.1:1=00112233445566778899aabbccddeeff",
        ],
        &["--trust", "/nonexistent/list"],
        &[],
        &[
            "--neighbour",
            "127.0.0.1:1=00112233445566778899aabbccddeeff",
            "--interval",
            "0s",
        ],
    ] {
        let out = Command::new(SIGIL)
            .args(["diet", "--state"])
            .arg(&state)
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} accepted");
        assert!(!state.exists(), "{args:?} made state");
    }
}

type Record = std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>;

/// Forwards what a node sends to `near` on to `far` from `out_sock`, and back, recording the
/// node's datagrams in `record`, until `until`.
fn recording_relay(
    near: UdpSocket,
    out_sock: UdpSocket,
    far: SocketAddr,
    node: SocketAddr,
    record: Record,
    until: Instant,
) {
    near.set_read_timeout(Some(Duration::from_millis(5)))
        .unwrap();
    out_sock
        .set_read_timeout(Some(Duration::from_millis(5)))
        .unwrap();
    let mut buf = [0u8; 2048];
    while Instant::now() < until {
        if let Ok((n, _)) = near.recv_from(&mut buf) {
            record.lock().unwrap().push(buf[..n].to_vec());
            out_sock.send_to(&buf[..n], far).unwrap();
        }
        if let Ok((n, _)) = out_sock.recv_from(&mut buf) {
            near.send_to(&buf[..n], node).unwrap();
        }
    }
}

#[test]
fn a_recorded_hello_and_messages_replayed_from_256_loopback_addresses_beside_a_newcomer() {
    // V trusts C and N by its identity list and configures nobody. C talks to V through a
    // relay that records C's datagrams; from 2.5 s to 7 s, 256 addresses 127.0.x.y replay
    // everything C sent so far at V, round after round; N, an honest newcomer, starts at 3 s.
    let dir = tempfile::tempdir().unwrap();
    let ids: Vec<String> = ["v", "c", "n"]
        .iter()
        .map(|n| identity(&dir.path().join(n)))
        .collect();
    let trust = dir.path().join("trust.txt");
    std::fs::write(&trust, format!("{}\n{}\n", ids[1], ids[2])).unwrap();
    let port = |_| -> SocketAddr { format!("127.0.0.1:{}", free_port()).parse().unwrap() };
    let (v_addr, c_addr, n_addr) = (port(0), port(1), port(2));
    let near = UdpSocket::bind("127.0.0.1:0").unwrap(); // V as C sees it
    let out_sock = UdpSocket::bind("127.0.0.1:0").unwrap(); // C as V sees it
    let (near_addr, c_seen) = (near.local_addr().unwrap(), out_sock.local_addr().unwrap());
    let spawn = |name: &str, listen: SocketAddr, extra: &[&str]| {
        Command::new(SIGIL)
            .args(["diet", "--json", "--interval", "300ms", "--listen"])
            .arg(listen.to_string())
            .arg("--state")
            .arg(dir.path().join(name))
            .args(["--message", &format!("from {name} #%n")])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let start = Instant::now();
    // V keeps the default hello interval (1 s): one challenge per key and per address a
    // second, four a second in all.
    let v = spawn(
        "v",
        v_addr,
        &["--duration", "8s", "--trust", trust.to_str().unwrap()],
    );
    std::thread::sleep(Duration::from_millis(300));
    let c = spawn(
        "c",
        c_addr,
        &[
            "--duration",
            "7s",
            "--hello-timeout",
            "300ms",
            "--neighbour",
            &format!("{near_addr}={}", ids[0]),
        ],
    );
    let record: Record = Default::default();
    let relay = {
        let record = record.clone();
        std::thread::spawn(move || {
            recording_relay(
                near,
                out_sock,
                v_addr,
                c_addr,
                record,
                start + Duration::from_millis(7500),
            )
        })
    };
    // The attacker: 256 loopback addresses, each a socket that also takes what V sends it.
    let attackers: Vec<UdpSocket> = (0..256u32)
        .map(|i| {
            let ip = format!("127.0.{}.{}", 2 + i / 250, 1 + i % 250);
            let s = UdpSocket::bind(format!("{ip}:0"))
                .unwrap_or_else(|e| panic!("cannot bind {ip}: {e}"));
            s.set_nonblocking(true).unwrap();
            s
        })
        .collect();
    while Instant::now() < start + Duration::from_millis(2500) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut n = None;
    let (mut sent, mut sent_bytes) = (0u64, 0usize);
    let mut got: Vec<Vec<u8>> = vec![];
    let mut buf = [0u8; 2048];
    let mut round = 0usize;
    while Instant::now() < start + Duration::from_millis(7000) {
        if n.is_none() && Instant::now() >= start + Duration::from_secs(3) {
            n = Some(spawn(
                "n",
                n_addr,
                &[
                    "--duration",
                    "4500ms",
                    "--hello-timeout",
                    "300ms",
                    "--neighbour",
                    &format!("{v_addr}={}", ids[0]),
                ],
            ));
        }
        let recorded = record.lock().unwrap().clone();
        // Each round, 16 of the addresses send everything recorded (hellos and messages).
        for s in attackers.iter().skip(16 * (round % 16)).take(16) {
            for d in &recorded {
                let _ = s.send_to(d, v_addr);
                sent += 1;
                sent_bytes += d.len();
            }
        }
        round += 1;
        for s in &attackers {
            while let Ok((len, _)) = s.recv_from(&mut buf) {
                got.push(buf[..len].to_vec());
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    relay.join().unwrap();
    let outs: Vec<_> = [Some(v), Some(c), n]
        .into_iter()
        .map(|c| c.expect("N started").wait_with_output().unwrap())
        .collect();
    for s in &attackers {
        while let Ok((len, _)) = s.recv_from(&mut buf) {
            got.push(buf[..len].to_vec());
        }
    }
    let ev: Vec<Vec<serde_json::Value>> = outs.iter().map(events).collect();
    for (i, o) in outs.iter().enumerate() {
        assert!(
            o.status.success(),
            "{i}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let summary = |i: usize| {
        ev[i]
            .iter()
            .find(|e| e["event"] == "summary")
            .unwrap()
            .clone()
    };
    let (vs, cs) = (summary(0), summary(1));
    // Every message of C's that V accepted, accepted once: as many as C's relay carried.
    let from_c: Vec<&str> = ev[0]
        .iter()
        .filter(|e| e["event"] == "message" && e["identity"] == ids[1].as_str())
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    let mut unique = from_c.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(
        unique.len(),
        from_c.len(),
        "a message of C's accepted twice: {from_c:?}"
    );
    let c_messages = record
        .lock()
        .unwrap()
        .iter()
        .filter(|d| d[0] == 0x02)
        .count();
    assert!(
        from_c.len() <= c_messages && from_c.len() >= 10,
        "{} of {c_messages}",
        from_c.len()
    );
    assert!(
        ev[0]
            .iter()
            .filter(|e| e["event"] == "message")
            .all(|e| e["from"] == c_seen.to_string() || e["from"] == n_addr.to_string()),
        "V accepted a message from a replaying address"
    );
    // C and the newcomer established with V, and V holds nobody else.
    assert_eq!(vs["established"], 2, "{vs}");
    assert_eq!(cs["established"], 1, "{cs}");
    assert_eq!(summary(2)["established"], 1, "{}", summary(2));
    assert!(
        ev[0]
            .iter()
            .any(|e| e["event"] == "message" && e["identity"] == ids[2].as_str()),
        "no message from the newcomer"
    );
    // The replaying addresses got hellos (challenges) only, a few in all.
    let got_bytes: usize = got.iter().map(|d| d.len()).sum();
    assert!(
        got.iter().all(|d| d[0] == 0x01),
        "data to a replaying address"
    );
    assert!(
        got.len() <= 12,
        "{} hellos to replaying addresses",
        got.len()
    );
    let r = &vs["refused"];
    assert_eq!(r["table_full"], 0, "{vs}");
    assert_eq!(vs["moved"], 0, "{vs}");
    // Every hello they got is a challenge V counted (V also challenged C and N once each).
    assert!(
        got.len() as u64 <= vs["challenges_sent"].as_u64().unwrap(),
        "{} hellos to replaying addresses: {vs}",
        got.len()
    );
    assert!(r["over_budget"].as_u64().unwrap() > 100, "{vs}");
    eprintln!(
        "256 addresses replayed {sent} datagrams ({sent_bytes} bytes) at V; they got {} hellos \
         ({got_bytes} bytes); V refused {} over budget, {} without a session, {} replays",
        got.len(),
        r["over_budget"],
        r["no_session"],
        r["replay"]
    );
}
