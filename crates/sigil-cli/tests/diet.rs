//! `sigil diet` over loopback UDP with real processes: three trusted nodes find each other
//! from their neighbour lists, run the three phases and exchange encrypted, signed messages.
//! The link between A and B runs through a relay in this test that replays one message and
//! tampers with another; a fourth node whose identity nobody listed says hello to C.

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
