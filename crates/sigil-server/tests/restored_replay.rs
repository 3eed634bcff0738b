//! A restored coaps:// session keeps its replay window across a server restart (issue 25,
//! finding 8), with real UDP sockets against the real server, stopped and started again over
//! the same database. A client with a connection ID asks three questions inside its session
//! and an eavesdropper records its datagrams; after the restart the recordings are replayed
//! from the client's address and, by connection ID, from another address. Before the fix the
//! restored session took the window of its last save (the handshake), so the recorded records
//! passed the record layer again and were answered, and the session followed the replayer's
//! address. Now each session's read mark (the highest record it acted on) is stored before
//! what a batch delivered is acted on, and a restored session accepts only records above it.
//! The same server in memory, with virtual time, for what needs one exact batch: a record
//! that delivered nothing (a retransmitted Finished) is marked too, and a session ended by a
//! failed save takes what it delivered earlier in the batch with it.
//! Every figure asserted is the server's own accounting.

use sigil_coap::{Code, Message, MessageBuilder, MessageType};
use sigil_crypto::{CryptoProvider, RustCrypto};
use sigil_dtls::{Config, Connection, Credentials, Traffic};
use sigil_dtls_coap::{CarrierConfig, Client as CoapClient};
use sigil_server::{DtlsConfig, Server, ServerConfig, ServerHandle, Stats, Store};
use sigil_testkit::Seeded;
use sigil_time::Instant;
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::time::Duration;

const PSK: [u8; 16] = *b"replay-test-psk!";

use common::{AnyServer, Process, Restore, Secure as InMemory};
use sigil_testkit::server as common;

fn start(rt: &tokio::runtime::Runtime, db: &Path) -> (ServerHandle, Stats, SocketAddr) {
    let mut config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), db.to_path_buf());
    config.dtls = Some(DtlsConfig::new("127.0.0.1:0".parse().unwrap()));
    let stats = Stats::default();
    let server = rt
        .block_on(Server::start(config, stats.clone()))
        .expect("server starts");
    let dtls = server.dtls.as_ref().unwrap().addr;
    (server, stats, dtls)
}

fn get(mid: u16) -> Vec<u8> {
    let mut buf = [0u8; 128];
    let mut b = MessageBuilder::new(
        &mut buf,
        MessageType::Confirmable,
        Code::GET,
        mid,
        &[mid as u8],
    )
    .unwrap();
    b.uri_path(".well-known/core").unwrap();
    let n = b.finish_with_payload(&[]).unwrap();
    buf[..n].to_vec()
}

/// Datagrams that arrive at `sock` within `wait`.
fn received(sock: &UdpSocket, wait: Duration) -> Vec<Vec<u8>> {
    let until = std::time::Instant::now() + wait;
    let mut got = vec![];
    let mut buf = [0u8; 2048];
    while std::time::Instant::now() < until {
        if let Ok((n, _)) = sock.recv_from(&mut buf) {
            got.push(buf[..n].to_vec());
        }
    }
    got
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

/// A UDP socket bound to `at` that waits 20 ms for a datagram.
fn socket(at: &str) -> UdpSocket {
    let sock = UdpSocket::bind(at).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    sock
}

/// Runs `c`'s handshake from `sock` with the server at `dtls` (real time, from `t0`).
fn handshake(
    c: &mut Connection<RustCrypto, AnyServer>,
    sock: &UdpSocket,
    dtls: SocketAddr,
    t0: std::time::Instant,
) {
    let at = || Instant::from_millis(t0.elapsed().as_millis() as u64);
    let mut buf = [0u8; 2048];
    while !c.is_established() {
        assert!(t0.elapsed() < Duration::from_secs(10), "no handshake");
        let _ = c.handle_timeout(at());
        while let Some(n) = c.poll_transmit(at(), &mut buf) {
            sock.send_to(&buf[..n], dtls).unwrap();
        }
        if let Ok((n, _)) = sock.recv_from(&mut buf) {
            let d = buf[..n].to_vec();
            let _ = c.handle_datagram(at(), &d);
        }
    }
}

/// Asks question `mid` inside `client`'s session from `sock`, keeping the datagrams it sent
/// in `recorded`: whether a 2.05 Content came within `wait_ms`.
fn ask(
    client: &mut Traffic<RustCrypto>,
    sock: &UdpSocket,
    dtls: SocketAddr,
    at: impl Fn() -> Instant,
    mid: u16,
    wait_ms: u64,
    recorded: &mut Vec<Vec<u8>>,
) -> bool {
    let mut buf = [0u8; 2048];
    client.send(&get(mid)).unwrap();
    while let Some(n) = client.poll_transmit(at(), &mut buf) {
        recorded.push(buf[..n].to_vec());
        sock.send_to(&buf[..n], dtls).unwrap();
    }
    let mut answered = false;
    for d in received(sock, Duration::from_millis(wait_ms)) {
        let _ = client.handle_datagram(at(), &d);
        let mut app = [0u8; 2048];
        while let Some(n) = client.poll_app_data(&mut app) {
            answered |= Message::parse(&app[..n]).is_ok_and(|m| m.code == Code::CONTENT);
        }
    }
    answered
}

#[test]
fn recorded_records_of_a_restored_session_are_not_taken_again_nor_move_it() {
    replayed_after_a_restart(false);
}

/// The same for a session whose handshake went over the CoAP carrier (`PUT /dtls`): once
/// established it is stored and restored like any other.
#[test]
fn the_same_holds_for_a_session_made_over_the_coap_carrier() {
    replayed_after_a_restart(true);
}

fn replayed_after_a_restart(over_coap: bool) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let text = provisioned(&db, 51);
    let rt = runtime();
    let (server, stats, dtls) = start(&rt, &db);

    let sock = socket("127.0.0.1:0");
    let t0 = std::time::Instant::now();
    let at = || Instant::from_millis(t0.elapsed().as_millis() as u64);
    let creds = Credentials::Psk {
        identity: text.as_bytes(),
        key: &PSK,
    };
    let config = Config {
        connection_id: true,
        ..Config::default()
    };
    let mut buf = [0u8; 2048];
    // The handshake by records or as a CoAP resource: either way an established Traffic.
    let mut client: Traffic<RustCrypto> = if over_coap {
        let mut rng = Seeded(53);
        let mut c = CoapClient::connect(
            RustCrypto,
            AnyServer,
            CarrierConfig {
                dtls: config,
                ..CarrierConfig::default()
            },
            &mut rng,
            creds,
            at(),
        )
        .unwrap();
        while !c.is_established() {
            assert!(t0.elapsed() < Duration::from_secs(10), "no handshake");
            let _ = c.handle_timeout(at());
            while let Some(n) = c.poll_transmit(at(), &mut buf) {
                sock.send_to(&buf[..n], dtls).unwrap();
            }
            if let Ok((n, _)) = sock.recv_from(&mut buf) {
                let d = buf[..n].to_vec();
                let _ = c.handle_datagram(at(), &d, &mut rng);
            }
        }
        c.into_traffic().ok().unwrap()
    } else {
        let mut c =
            Connection::connect(RustCrypto, AnyServer, config, &mut Seeded(52), creds, at())
                .unwrap();
        handshake(&mut c, &sock, dtls, t0);
        c.into_traffic().ok().unwrap()
    };

    // Three questions, each answered; the eavesdropper keeps the datagrams.
    let mut recorded = vec![];
    for mid in 1..=3u16 {
        let answered = ask(&mut client, &sock, dtls, at, mid, 500, &mut recorded);
        assert!(answered, "question {mid} answered before the restart");
    }
    assert_eq!(recorded.len(), 3);
    // tls12_cid records (RFC 9146): the server gave the client a connection ID.
    assert!(recorded.iter().all(|r| r[0] == 25));
    assert_eq!(stats.get("dtls.app_records"), 3);

    // The server stops and starts again over the same database.
    rt.block_on(server.shutdown());
    let (server, stats, dtls) = start(&rt, &db);
    assert_eq!(stats.get("dtls.session_restored"), 1);

    // The recordings from the client's own address: none answered.
    for r in &recorded {
        sock.send_to(r, dtls).unwrap();
    }
    assert!(
        received(&sock, Duration::from_millis(800)).is_empty(),
        "a recorded record was answered after the restart"
    );
    // From another address, by connection ID: none answered, and the session stays.
    let replayer = socket("127.0.0.2:0");
    for r in &recorded {
        replayer.send_to(r, dtls).unwrap();
    }
    assert!(
        received(&replayer, Duration::from_millis(800)).is_empty(),
        "a recorded record was answered at the replayer's address"
    );
    let wait = std::time::Instant::now() + Duration::from_secs(5);
    while stats.get("dtls.records_dropped") < 6 && std::time::Instant::now() < wait {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(stats.get("dtls.app_records"), 0, "no recorded record taken");
    assert_eq!(stats.get("dtls.records_dropped"), 6);
    assert_eq!(
        stats.get("dtls.address_changed"),
        0,
        "the session did not move"
    );

    // The client's own next record, above the mark, is taken and answered at its address.
    let answered = ask(&mut client, &sock, dtls, at, 4, 800, &mut vec![]);
    assert!(
        answered,
        "the client's own next question answered after the restart"
    );
    assert_eq!(stats.get("dtls.app_records"), 1);
    assert_eq!(stats.get("dtls.handshake_completed"), 0, "no new handshake");
    rt.block_on(server.shutdown());
}

/// A row an older server wrote (no read mark: its window is the one of its last save) is not
/// restored, and says why in its counter; its device handshakes again.
#[test]
fn a_stored_session_without_a_read_mark_is_dropped_with_its_reason() {
    use sigil_dtls::SavedAssociation;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let text = provisioned(&db, 61);
    let rt = runtime();
    let (server, stats, dtls) = start(&rt, &db);
    let sock = socket("127.0.0.1:0");
    let t0 = std::time::Instant::now();
    let at = || Instant::from_millis(t0.elapsed().as_millis() as u64);
    let mut client = Connection::connect(
        RustCrypto,
        AnyServer,
        Config::default(),
        &mut Seeded(62),
        Credentials::Psk {
            identity: text.as_bytes(),
            key: &PSK,
        },
        at(),
    )
    .unwrap();
    handshake(&mut client, &sock, dtls, t0);
    let wait = std::time::Instant::now() + Duration::from_secs(5);
    while stats.get("dtls.session_saved") == 0 && std::time::Instant::now() < wait {
        std::thread::sleep(Duration::from_millis(20));
    }
    rt.block_on(server.shutdown());

    // The row as an older server wrote it: the same association, saved without a mark,
    // MACed under the server's storage key (derived from its DTLS key).
    let store = Store::open(&db).unwrap();
    let (_, secret) = store
        .server_key("dtls")
        .unwrap()
        .expect("the server's DTLS key");
    let storage_key = RustCrypto.hmac_sha256(&secret, &[b"sigil-server dtls sessions"]);
    let mut rows = store.dtls_sessions().unwrap();
    assert_eq!(rows.len(), 1);
    let saved = SavedAssociation::decode(&RustCrypto, &storage_key, &rows[0].record).unwrap();
    assert!(saved.read_mark().is_some(), "the server stores a read mark");
    let old = Traffic::restore(RustCrypto, saved).save(256).unwrap();
    assert_eq!(old.read_mark(), None);
    let mut out = [0u8; sigil_dtls::saved::MAX_ENCODED_LEN];
    let n = old.encode(&RustCrypto, &storage_key, &mut out).unwrap();
    rows[0].record = out[..n].to_vec();
    store.put_dtls_session(&rows[0]).unwrap();
    drop(store);

    let (server, stats, _) = start(&rt, &db);
    assert_eq!(stats.get("dtls.session_restored"), 0);
    assert_eq!(stats.get("dtls.session_not_restored_no_read_mark"), 1);
    assert_eq!(stats.get("dtls.session_not_restored"), 1);
    assert!(Store::open(&db)
        .unwrap()
        .dtls_sessions()
        .unwrap()
        .is_empty());
    rt.block_on(server.shutdown());
}

/// The server in memory (its DTLS layer, dispatcher and service over one database) with
/// virtual time, for what needs one batch of datagrams exactly or a database refusing writes:
/// a server process over `db`, restoring the sessions stored there (and storing its own).
fn in_memory(db: &Path, seed: u64) -> InMemory {
    InMemory::start(
        db.to_path_buf(),
        |_| {},
        |_| {},
        Process {
            secret: seed as u8,
            rng: seed,
            restore: Restore::WithCredentials,
            ..Process::default()
        },
    )
}

/// A provisioned PSK device in a fresh database.
fn provisioned(db: &Path, seed: u64) -> String {
    let id = common::ed25519_identity(seed);
    common::provision(db, &id, Some(&PSK));
    id.to_string()
}

/// A PSK client with a connection ID.
fn cid_client(text: &str, seed: u64) -> Connection<RustCrypto, AnyServer> {
    Connection::connect(
        RustCrypto,
        AnyServer,
        Config {
            connection_id: true,
            ..Config::default()
        },
        &mut Seeded(seed),
        Credentials::Psk {
            identity: text.as_bytes(),
            key: &PSK,
        },
        Instant::from_millis(0),
    )
    .unwrap()
}

/// Runs `client`'s handshake at `device` against `s` in 50 ms steps from `*now`; `sent` sees
/// each step's datagrams of the client, and a datagram of the server's for which `lost` says
/// so does not reach the client.
fn handshake_in_memory(
    s: &mut InMemory,
    client: &mut Connection<RustCrypto, AnyServer>,
    device: SocketAddr,
    now: &mut u64,
    mut sent: impl FnMut(&[(SocketAddr, Vec<u8>)]),
    mut lost: impl FnMut(&[u8]) -> bool,
) {
    let mut buf = [0u8; 2048];
    while !client.is_established() {
        assert!(*now < 30_000, "no handshake");
        let _ = client.handle_timeout(Instant::from_millis(*now));
        let mut out = vec![];
        while let Some(n) = client.poll_transmit(Instant::from_millis(*now), &mut buf) {
            out.push((device, buf[..n].to_vec()));
        }
        sent(&out);
        for (_, d) in s.handle(*now, out) {
            if lost(&d) {
                continue;
            }
            let _ = client.handle_datagram(Instant::from_millis(*now), &d);
        }
        *now += 50;
    }
}

/// The tls12_cid records of a datagram (RFC 9146: type 25), from the first one on.
fn cid_records(datagram: &[u8]) -> Option<Vec<u8>> {
    let mut at = 0;
    while at + 13 <= datagram.len() {
        if datagram[at] == 25 {
            return Some(datagram[at..].to_vec());
        }
        let len = u16::from_be_bytes([datagram[at + 11], datagram[at + 12]]) as usize;
        at += 13 + len;
    }
    None
}

/// Finding 6 of the read-mark review: a record the session accepted that delivered no
/// application data (here the client's Finished, retransmitted because the server's final
/// flight was lost) moves the window too, so its mark is stored as well. Before, only records
/// delivering data were marked: if such a record was the session's last before a restart,
/// its recording passed the restored window, and sent by connection ID from another address
/// it moved the session there and drew the server's final flight to the replayer.
#[test]
fn a_retransmitted_finished_is_marked_and_not_taken_again_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let text = provisioned(&db, 71);
    let mut s = in_memory(&db, 1);
    let device: SocketAddr = "10.0.0.1:40001".parse().unwrap();
    let mut client = cid_client(&text, 72);
    let mut now = 0u64;
    let lost_final_flight = std::cell::Cell::new(false);
    let mut retransmitted = None;
    handshake_in_memory(
        &mut s,
        &mut client,
        device,
        &mut now,
        |sent| {
            if lost_final_flight.get() {
                // The client's final flight again: its Finished under fresh record numbers.
                if let Some(r) = sent.iter().find_map(|(_, d)| cid_records(d)) {
                    retransmitted.get_or_insert(r);
                }
            }
        },
        |d| {
            // The server's final flight (ChangeCipherSpec first) is lost once.
            if d[0] == 20 && !lost_final_flight.get() {
                lost_final_flight.set(true);
                return true;
            }
            false
        },
    );
    let finished = retransmitted.expect("the client's Finished went again, as a tls12_cid record");
    assert_eq!(s.count("dtls.handshake_completed"), 1);
    assert_eq!(s.count("dtls.app_records"), 0, "no application data");

    // The server crashes; the same database.
    drop(s);
    let mut s = in_memory(&db, 2);
    assert_eq!(s.count("dtls.session_restored"), 1);
    // The recorded Finished, by connection ID from another address: refused, nothing sent.
    let replayer: SocketAddr = "10.0.0.2:40002".parse().unwrap();
    let out = s.handle(now, vec![(replayer, finished.clone())]);
    assert!(
        out.iter().all(|(to, _)| *to != replayer),
        "the replayer drew the final flight"
    );
    assert_eq!(
        s.count("dtls.address_changed"),
        0,
        "the session did not move"
    );
    assert_eq!(s.count("dtls.records_dropped"), 1);
    // From the device's own address: refused too.
    let out = s.handle(now + 10, vec![(device, finished)]);
    assert!(out.is_empty(), "the recorded Finished was answered");
    assert_eq!(s.count("dtls.records_dropped"), 2);
}

/// Finding 7 of the read-mark review: a session that delivers a request at its address and,
/// later in the same batch, follows its connection ID to a new address whose save fails is
/// ended, and the request it delivered before is dropped with it: nothing is acted on without
/// a persisted read mark. Before, the marks to store were looked up by address, the ended
/// session was at none, and its earlier request was acted on.
#[test]
fn a_session_ended_by_a_failed_save_takes_its_earlier_deliveries_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let text = provisioned(&db, 81);
    let mut s = in_memory(&db, 3);
    let device: SocketAddr = "10.0.0.1:40001".parse().unwrap();
    let mut client = cid_client(&text, 82);
    let mut now = 0u64;
    handshake_in_memory(&mut s, &mut client, device, &mut now, |_| {}, |_| false);
    let mut buf = [0u8; 2048];
    assert!(s.count("dtls.session_saved") >= 1);

    // The database now refuses every write of a session row (a full disk, say).
    let db_conn = rusqlite::Connection::open(&db).unwrap();
    db_conn
        .execute_batch(
            "CREATE TRIGGER no_insert BEFORE INSERT ON dtls_sessions
               BEGIN SELECT RAISE(FAIL, 'disk full'); END;
             CREATE TRIGGER no_update BEFORE UPDATE ON dtls_sessions
               BEGIN SELECT RAISE(FAIL, 'disk full'); END;",
        )
        .unwrap();

    // One batch: a question from the device's address, then one by connection ID from a new
    // address (a NAT rebinding), whose move cannot be saved.
    let mut records = vec![];
    for mid in 1..=2u16 {
        client.send(&get(mid)).unwrap();
        while let Some(n) = client.poll_transmit(Instant::from_millis(now), &mut buf) {
            records.push(buf[..n].to_vec());
        }
    }
    assert_eq!(records.len(), 2);
    let moved: SocketAddr = "10.0.0.3:40003".parse().unwrap();
    let received_before = s.count("coap.received");
    let out = s.handle(
        now,
        vec![(device, records[0].clone()), (moved, records[1].clone())],
    );
    assert!(
        s.count("dtls.session_save_failed") >= 1,
        "the move's save failed"
    );
    assert_eq!(s.layer.sessions(), 0, "the session ended");
    assert_eq!(
        s.count("coap.received") - received_before,
        0,
        "a request was acted on without a persisted read mark"
    );
    assert!(out.is_empty());
}
