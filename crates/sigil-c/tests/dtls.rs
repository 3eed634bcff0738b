//! The C library's DTLS client against real servers, through its exported functions:
//! Sigil's own DTLS server (`sigil-dtls`, stateless cookie exchange, then
//! `Connection::accept`) in virtual time, with hand-placed loss and duplication; and
//! OpenSSL's `openssl s_server -dtls1_2` and GnuTLS's `gnutls-serv --udp` with
//! TLS_PSK_WITH_AES_128_CCM_8 over real UDP.
#![cfg(feature = "dtls")]

use core::ffi::c_void;
use sigil::*;
use sigil_crypto::{CryptoProvider, RustCrypto, SecretKey, SignatureAlgorithm};
use sigil_dtls::{
    Config, Connection, CookieKey, PinnedIdentities, ServerCredentials, Stateless, Trust,
};
use sigil_identity::Identity;
use sigil_testkit::dtls::{OnePsk, SENSOR_PSK};
use sigil_testkit::Seeded;
use sigil_time::Instant;

/// The client's randomness: deterministic, from a seed in `ctx` (a test, not a device).
unsafe extern "C" fn seeded_rng(ctx: *mut c_void, buf: *mut u8, len: usize) -> i32 {
    let seed = unsafe { &mut *ctx.cast::<Seeded>() };
    let buf = unsafe { core::slice::from_raw_parts_mut(buf, len) };
    match sigil_crypto::Rng::fill(seed, buf) {
        Ok(()) => 0,
        Err(_) => -1,
    }
}

/// A `sigil_dtls_client` in memory this test owns (8-byte aligned words).
struct Client {
    mem: Vec<u64>,
    rng: Box<Seeded>,
}

impl Client {
    fn new(seed: u64) -> Self {
        Client {
            mem: vec![0u64; SIGIL_DTLS_CLIENT_WORDS],
            rng: Box::new(Seeded::new(seed)),
        }
    }

    fn ptr(&mut self) -> *mut sigil_dtls_client {
        self.mem.as_mut_ptr().cast()
    }

    fn connect(&mut self, cfg: &sigil_dtls_config, now: u64) -> sigil_status {
        let platform = sigil_platform {
            rng: Some(seeded_rng),
            storage_read: None,
            storage_write: None,
            ctx: (&mut *self.rng as *mut Seeded).cast(),
        };
        unsafe { sigil_dtls_connect(self.ptr(), SIGIL_DTLS_CLIENT_SIZE, cfg, &platform, now) }
    }

    fn transmit(&mut self, now: u64) -> Vec<Vec<u8>> {
        let mut out = vec![];
        let mut buf = [0u8; SIGIL_DTLS_MAX_DATAGRAM];
        loop {
            let mut len = 0;
            let s = unsafe {
                sigil_dtls_poll_transmit(self.ptr(), now, buf.as_mut_ptr(), buf.len(), &mut len)
            };
            assert_eq!(s, sigil_status::SIGIL_OK);
            if len == 0 {
                return out;
            }
            out.push(buf[..len].to_vec());
        }
    }

    fn handle(&mut self, now: u64, d: &[u8]) -> sigil_status {
        unsafe { sigil_dtls_handle_datagram(self.ptr(), now, d.as_ptr(), d.len()) }
    }

    fn timeout(&mut self) -> Option<u64> {
        let mut at = 0;
        let s = unsafe { sigil_dtls_poll_timeout(self.ptr(), &mut at) };
        assert_eq!(s, sigil_status::SIGIL_OK);
        (at != SIGIL_NEVER).then_some(at)
    }

    fn handle_timeout(&mut self, now: u64) -> sigil_status {
        unsafe { sigil_dtls_handle_timeout(self.ptr(), now) }
    }

    fn send(&mut self, data: &[u8]) -> sigil_status {
        unsafe { sigil_dtls_send(self.ptr(), data.as_ptr(), data.len()) }
    }

    fn recv(&mut self) -> Vec<Vec<u8>> {
        let mut out = vec![];
        let mut buf = [0u8; SIGIL_DTLS_MAX_APP_DATA];
        loop {
            let mut len = 0;
            let s = unsafe { sigil_dtls_recv(self.ptr(), buf.as_mut_ptr(), buf.len(), &mut len) };
            assert_eq!(s, sigil_status::SIGIL_OK);
            if len == 0 {
                return out;
            }
            out.push(buf[..len].to_vec());
        }
    }

    fn info(&mut self) -> sigil_dtls_info {
        let mut info = core::mem::MaybeUninit::<sigil_dtls_info>::uninit();
        let s = unsafe { sigil_dtls_get_info(self.ptr(), info.as_mut_ptr()) };
        assert_eq!(s, sigil_status::SIGIL_OK);
        unsafe { info.assume_init() }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        unsafe { sigil_dtls_end(self.ptr()) };
    }
}

fn psk_config(identity: &[u8], key: &[u8]) -> sigil_dtls_config {
    let mut cfg = core::mem::MaybeUninit::uninit();
    assert_eq!(
        unsafe { sigil_dtls_config_default(cfg.as_mut_ptr()) },
        sigil_status::SIGIL_OK
    );
    let mut cfg: sigil_dtls_config = unsafe { cfg.assume_init() };
    cfg.psk_identity = identity.as_ptr();
    cfg.psk_identity_len = identity.len();
    cfg.psk = key.as_ptr();
    cfg.psk_len = key.len();
    cfg
}

/// Sigil's DTLS server for one peer: the stateless cookie exchange until a ClientHello
/// carries a valid cookie, then `Connection::accept`.
struct Server<'a, T> {
    cookies: CookieKey,
    trust: Option<T>,
    offer: ServerCredentials<'a>,
    rng: Seeded,
    conn: Option<Connection<RustCrypto, T>>,
}

impl<'a, T: Trust> Server<'a, T> {
    fn new(trust: T, offer: ServerCredentials<'a>) -> Self {
        Server {
            cookies: CookieKey::new([7; 32]),
            trust: Some(trust),
            offer,
            rng: Seeded::new(2),
            conn: None,
        }
    }

    fn handle(&mut self, now: u64, d: &[u8], replies: &mut Vec<Vec<u8>>) {
        let now = Instant::from_millis(now);
        if let Some(c) = &mut self.conn {
            let _ = c.handle_datagram(now, d);
            return;
        }
        let mut out = [0u8; 256];
        match self
            .cookies
            .respond(&RustCrypto, b"[::1]:5684", d, &mut out)
        {
            Stateless::HelloVerify(n) => replies.push(out[..n].to_vec()),
            Stateless::Accept(proof) => {
                let trust = self.trust.take().expect("one accepted ClientHello");
                self.conn = Some(
                    Connection::accept(
                        RustCrypto,
                        trust,
                        Config::default(),
                        &self.offer,
                        &mut self.rng,
                        proof,
                        d,
                        now,
                    )
                    .expect("the server accepts the ClientHello"),
                );
            }
            Stateless::Drop(e) => panic!("the server dropped a client datagram: {e}"),
        }
    }

    fn transmit(&mut self, now: u64) -> Vec<Vec<u8>> {
        let mut out = vec![];
        let mut buf = [0u8; 2048];
        if let Some(c) = &mut self.conn {
            while let Some(n) = c.poll_transmit(Instant::from_millis(now), &mut buf) {
                out.push(buf[..n].to_vec());
            }
        }
        out
    }

    fn conn(&mut self) -> &mut Connection<RustCrypto, T> {
        self.conn.as_mut().expect("accepted")
    }
}

/// What crossed the link, per direction: datagrams and bytes.
#[derive(Debug, Default)]
struct Traffic {
    to_server: (usize, usize),
    to_client: (usize, usize),
}

/// Moves datagrams between the C client and the server in virtual time (no latency), firing
/// timers when nothing is in flight, until `done` or `limit_ms`. `fate(direction, index)`
/// decides how many copies of each datagram arrive (0: lost, 2: duplicated); direction 0
/// is towards the server.
fn run<T: Trust>(
    client: &mut Client,
    server: &mut Server<'_, T>,
    now: &mut u64,
    limit_ms: u64,
    traffic: &mut Traffic,
    fate: &mut dyn FnMut(usize, usize) -> usize,
    done: &mut dyn FnMut(&mut Client, &mut Server<'_, T>) -> bool,
) -> bool {
    loop {
        if done(client, server) {
            return true;
        }
        let mut moved = false;
        for d in client.transmit(*now) {
            moved = true;
            traffic.to_server.0 += 1;
            traffic.to_server.1 += d.len();
            let mut replies = vec![];
            for _ in 0..fate(0, traffic.to_server.0 - 1) {
                server.handle(*now, &d, &mut replies);
            }
            for r in replies {
                traffic.to_client.0 += 1;
                traffic.to_client.1 += r.len();
                for _ in 0..fate(1, traffic.to_client.0 - 1) {
                    client.handle(*now, &r);
                }
            }
        }
        for d in server.transmit(*now) {
            moved = true;
            traffic.to_client.0 += 1;
            traffic.to_client.1 += d.len();
            for _ in 0..fate(1, traffic.to_client.0 - 1) {
                client.handle(*now, &d);
            }
        }
        if moved {
            continue;
        }
        let server_at = server
            .conn
            .as_ref()
            .and_then(|c| c.poll_timeout())
            .map(Instant::as_millis);
        let Some(next) = [client.timeout(), server_at].into_iter().flatten().min() else {
            return done(client, server);
        };
        if next > limit_ms {
            return false;
        }
        *now = (*now).max(next);
        client.handle_timeout(*now);
        if let Some(c) = &mut server.conn {
            let _ = c.handle_timeout(Instant::from_millis(*now));
        }
    }
}

fn established<T: Trust>(c: &mut Client, s: &mut Server<'_, T>) -> bool {
    c.info().established && s.conn.as_ref().is_some_and(|c| c.is_established())
}

/// Runs the handshake on a perfect link until both sides are established (within 10 s of
/// virtual time); returns the virtual time then, and what crossed the link.
fn handshake<T: Trust>(client: &mut Client, server: &mut Server<'_, T>) -> (u64, Traffic) {
    let (mut now, mut traffic) = (0, Traffic::default());
    assert!(run(
        client,
        server,
        &mut now,
        10_000,
        &mut traffic,
        &mut |_, _| 1,
        &mut established
    ));
    (now, traffic)
}

const PSK_ONLY: ServerCredentials<'static> = ServerCredentials {
    psk: true,
    ..ServerCredentials::NONE
};

#[test]
fn a_psk_ccm8_handshake_with_sigils_server_then_coap_datagrams_both_ways_then_close() {
    let mut client = Client::new(1);
    let cfg = psk_config(SENSOR_PSK.identity, SENSOR_PSK.key);
    assert_eq!(client.connect(&cfg, 0), sigil_status::SIGIL_OK);
    let mut server = Server::new(SENSOR_PSK, PSK_ONLY);
    let (now, traffic) = handshake(&mut client, &mut server);
    // ClientHello, HelloVerifyRequest, ClientHello with the cookie, the server's flight,
    // the client's, the server's last: no retransmission on a perfect link.
    assert_eq!(now, 0, "no timer fired");
    assert_eq!(server.conn().psk_identity(), SENSOR_PSK.identity);
    println!("PSK-CCM8 handshake: {traffic:?} (datagrams, bytes)");
    assert_eq!(traffic.to_server.0, 3, "{traffic:?}");
    assert_eq!(traffic.to_client.0, 3, "{traffic:?}");
    assert_eq!(client.timeout(), None, "established: no timer");

    // A CoAP POST the size a device sends, and the server's answer, one record each.
    let post = [0x42u8, 0x02, 0x12, 0x34, 0xab, 0xcd, 0xb2, b'p', b's'];
    assert_eq!(client.send(&post), sigil_status::SIGIL_OK);
    assert_eq!(client.send(&[0x55; 600]), sigil_status::SIGIL_OK);
    let records = client.transmit(now);
    assert_eq!(records.len(), 2);
    // 13-byte header, 8-byte explicit nonce, 8-byte CCM-8 tag around the plaintext.
    assert_eq!(records[0].len(), post.len() + 29);
    assert_eq!(records[0][0], 23, "application_data");
    for r in &records {
        server
            .conn()
            .handle_datagram(Instant::from_millis(now), r)
            .unwrap();
    }
    let mut buf = [0u8; 2048];
    let n = server.conn().poll_app_data(&mut buf).unwrap();
    assert_eq!(&buf[..n], post);
    let n = server.conn().poll_app_data(&mut buf).unwrap();
    assert_eq!(&buf[..n], [0x55; 600]);
    server.conn().send(b"\x62\x44\x12\x34ack").unwrap();
    for d in server.transmit(now) {
        assert_eq!(client.handle(now, &d), sigil_status::SIGIL_OK);
    }
    assert_eq!(client.recv(), [b"\x62\x44\x12\x34ack".to_vec()]);

    // A replayed record is dropped and counted, not delivered twice.
    server
        .conn()
        .handle_datagram(Instant::from_millis(now), &records[0])
        .unwrap();
    assert_eq!(server.conn().poll_app_data(&mut buf), None);
    assert_eq!(server.conn().dropped(), 1);

    // close_notify: the server sees the connection end; the client sends nothing more.
    assert_eq!(
        unsafe { sigil_dtls_close(client.ptr()) },
        sigil_status::SIGIL_OK
    );
    for d in client.transmit(now) {
        let _ = server.conn().handle_datagram(Instant::from_millis(now), &d);
    }
    assert_eq!(
        server.conn().failure(),
        Some(sigil_dtls::Error::PeerAlert(0))
    );
    let info = client.info();
    assert_eq!(info.state, sigil_dtls_state::SIGIL_DTLS_CLOSED);
    assert_eq!(
        client.send(&post),
        sigil_status::SIGIL_ERR_DTLS_NOT_ESTABLISHED
    );
    assert_eq!(
        unsafe { sigil_dtls_close(client.ptr()) },
        sigil_status::SIGIL_ERR_DTLS_NOT_ESTABLISHED
    );
}

#[test]
fn the_handshake_survives_a_lost_server_flight_and_duplicated_datagrams() {
    let mut client = Client::new(3);
    let mut cfg = psk_config(SENSOR_PSK.identity, SENSOR_PSK.key);
    cfg.initial_timeout_ms = 500;
    assert_eq!(client.connect(&cfg, 0), sigil_status::SIGIL_OK);
    let mut server = Server::new(SENSOR_PSK, PSK_ONLY);
    let (mut now, mut traffic) = (0, Traffic::default());
    // Everything towards the server arrives twice (so two HelloVerifyRequests come back,
    // datagrams 0 and 1 towards the client); the server's flight after the cookie exchange,
    // datagram 2, is lost.
    let mut fate = |dir: usize, i: usize| match (dir, i) {
        (1, 2) => 0,
        (0, _) => 2,
        _ => 1,
    };
    assert!(run(
        &mut client,
        &mut server,
        &mut now,
        60_000,
        &mut traffic,
        &mut fate,
        &mut established
    ));
    assert!(
        now >= 500,
        "the client retransmitted after its timer: {now}"
    );
    println!(
        "lossy PSK handshake: {traffic:?}, done at {now} ms, client dropped {}",
        client.info().dropped
    );
    assert_eq!(client.send(b"after loss"), sigil_status::SIGIL_OK);
    for d in client.transmit(now) {
        server
            .conn()
            .handle_datagram(Instant::from_millis(now), &d)
            .unwrap();
    }
    let mut buf = [0u8; 64];
    let n = server.conn().poll_app_data(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"after loss");
}

#[test]
fn ecdhe_psk_completes_with_sigils_server() {
    let mut client = Client::new(4);
    let mut cfg = psk_config(SENSOR_PSK.identity, SENSOR_PSK.key);
    cfg.suite = sigil_dtls_suite::SIGIL_DTLS_ECDHE_PSK_CCM8 as u32;
    assert_eq!(client.connect(&cfg, 0), sigil_status::SIGIL_OK);
    let mut server = Server::new(SENSOR_PSK, PSK_ONLY);
    let (_, traffic) = handshake(&mut client, &mut server);
    println!("ECDHE-PSK-CCM8 handshake: {traffic:?}");
    assert_eq!(
        server
            .conn()
            .traffic()
            .map(|t| t.peer().psk_identity().to_vec()),
        Some(SENSOR_PSK.identity.to_vec())
    );
}

#[test]
fn a_wrong_psk_never_establishes() {
    let mut client = Client::new(5);
    let cfg = psk_config(SENSOR_PSK.identity, b"not the right k!");
    assert_eq!(client.connect(&cfg, 0), sigil_status::SIGIL_OK);
    let mut server = Server::new(SENSOR_PSK, PSK_ONLY);
    let (mut now, mut traffic) = (0, Traffic::default());
    let mut failed = |c: &mut Client, _: &mut Server<'_, OnePsk>| {
        c.info().state == sigil_dtls_state::SIGIL_DTLS_FAILED
    };
    assert!(run(
        &mut client,
        &mut server,
        &mut now,
        600_000,
        &mut traffic,
        &mut |_, _| 1,
        &mut failed
    ));
    assert!(!server.conn().is_established());
    let info = client.info();
    assert!(!info.established);
    assert!(info.alert_from_peer || info.timed_out, "{info:?}");
}

/// A P-256 key from a seed byte (a valid scalar for these seeds).
fn p256(seed: u8) -> SecretKey {
    SecretKey::from_bytes(SignatureAlgorithm::EcdsaP256, &[seed; 32]).unwrap()
}

/// How one ECDHE-ECDSA-CCM8 handshake with raw public keys and mutual authentication ended:
/// the client's view, the key the server saw, whether the server completed, and the link.
struct EcdsaRun {
    info: sigil_dtls_info,
    device_public: sigil_crypto::PublicKey,
    server_saw: Option<sigil_crypto::PublicKey>,
    server_established: bool,
    traffic: Traffic,
}

/// The C client with `device` (an `alg` key) against Sigil's server with a P-256 key; the
/// server pins the device's identity, the client the server's, or `pin` instead when given.
/// Runs until both are established or the client failed.
fn ecdhe_ecdsa(device: &SecretKey, alg: sigil_alg, pin: Option<[u8; 16]>, seed: u64) -> EcdsaRun {
    let server_key = p256(0x22);
    let device_public = RustCrypto.public_key(device).unwrap();
    let server_public = RustCrypto.public_key(&server_key).unwrap();
    let ids = [Identity::of_key(&RustCrypto, &device_public, b"").unwrap()];
    let server_id = Identity::of_key(&RustCrypto, &server_public, b"").unwrap();
    let pinned = pin.unwrap_or(*server_id.as_bytes());
    let offer = ServerCredentials {
        key: Some(&server_key),
        require_client_key: true,
        ..ServerCredentials::NONE
    };
    let secret = device.to_bytes();
    let mut cfg = psk_config(b"", b"");
    cfg.suite = sigil_dtls_suite::SIGIL_DTLS_ECDHE_ECDSA_CCM8 as u32;
    cfg.server_identity = pinned.as_ptr();
    cfg.own_alg = alg as u32;
    cfg.own_secret = secret.as_ptr();
    let mut client = Client::new(seed);
    assert_eq!(client.connect(&cfg, 0), sigil_status::SIGIL_OK);
    let trust = PinnedIdentities {
        crypto: RustCrypto,
        identities: &ids,
    };
    let mut server = Server::new(trust, offer);
    let (mut now, mut traffic) = (0, Traffic::default());
    let mut over = |c: &mut Client, s: &mut Server<'_, PinnedIdentities<'_, RustCrypto>>| {
        established(c, s) || c.info().state == sigil_dtls_state::SIGIL_DTLS_FAILED
    };
    assert!(run(
        &mut client,
        &mut server,
        &mut now,
        10_000,
        &mut traffic,
        &mut |_, _| 1,
        &mut over
    ));
    EcdsaRun {
        info: client.info(),
        server_saw: server.conn().peer_public_key().cloned(),
        server_established: server.conn().is_established(),
        device_public,
        traffic,
    }
}

#[test]
fn ecdhe_ecdsa_with_the_device_key_and_a_pinned_server_identity() {
    let r = ecdhe_ecdsa(&p256(0x11), sigil_alg::SIGIL_ALG_ECDSA_P256, None, 6);
    assert!(r.info.established && r.server_established, "{:?}", r.info);
    println!(
        "ECDHE-ECDSA-CCM8 (raw public keys, mutual) handshake: {:?}",
        r.traffic
    );
    assert_eq!(r.server_saw, Some(r.device_public));

    // Pinned to another identity, the client refuses the server's key with a fatal alert.
    let r = ecdhe_ecdsa(
        &p256(0x11),
        sigil_alg::SIGIL_ALG_ECDSA_P256,
        Some([0x5a; 16]),
        7,
    );
    let info = r.info;
    assert_eq!(info.state, sigil_dtls_state::SIGIL_DTLS_FAILED, "{info:?}");
    assert!(
        !info.alert_from_peer && !info.timed_out && info.alert != 0,
        "{info:?}"
    );
    assert!(!r.server_established);
}

/// The C client over a real UDP socket on loopback, on the real clock.
struct Udp {
    sock: std::net::UdpSocket,
    start: std::time::Instant,
    /// Datagrams and bytes each way.
    sent: (usize, usize),
    received: (usize, usize),
}

impl Udp {
    fn connect(port: u16) -> Self {
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.connect(("127.0.0.1", port)).unwrap();
        Udp {
            sock,
            start: std::time::Instant::now(),
            sent: (0, 0),
            received: (0, 0),
        }
    }

    fn ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    fn flush(&mut self, client: &mut Client) {
        for d in client.transmit(self.ms()) {
            self.sent = (self.sent.0 + 1, self.sent.1 + d.len());
            // Refused (ICMP port unreachable) only until the server listens: it retransmits.
            let _ = self.sock.send(&d);
        }
    }

    /// Moves records between the socket and the client, firing its timer, until `until`
    /// holds (given the application datagrams received so far), for at most 20 s.
    fn exchange(
        &mut self,
        client: &mut Client,
        until: &dyn Fn(&mut Client, &[Vec<u8>]) -> bool,
    ) -> Vec<Vec<u8>> {
        use std::time::Duration;
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let mut got = vec![];
        let mut buf = [0u8; 2048];
        while !until(client, &got) {
            assert!(
                std::time::Instant::now() < deadline,
                "no progress: {:?}",
                client.info()
            );
            self.flush(client);
            let wait = client
                .timeout()
                .map_or(50, |at| at.saturating_sub(self.ms()).clamp(1, 50));
            self.sock
                .set_read_timeout(Some(Duration::from_millis(wait)))
                .unwrap();
            match self.sock.recv(&mut buf) {
                Ok(n) => {
                    self.received = (self.received.0 + 1, self.received.1 + n);
                    let s = client.handle(self.ms(), &buf[..n]);
                    assert_eq!(s, sigil_status::SIGIL_OK, "{:?}", client.info());
                    got.extend(client.recv());
                }
                Err(_) => {
                    client.handle_timeout(self.ms());
                }
            }
        }
        got
    }
}

fn free_udp_port() -> u16 {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    s.local_addr().unwrap().port()
}

fn key_hex() -> String {
    SENSOR_PSK.key.iter().map(|b| format!("{b:02x}")).collect()
}

/// The lines a child process prints, as they come.
fn lines_of(out: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    use std::io::{BufRead, BufReader};
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    lines
}

/// Waits up to 10 s for a line that satisfies `want`.
fn wait_for(lines: &std::sync::mpsc::Receiver<String>, what: &str, want: impl Fn(&str) -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if let Ok(l) = lines.recv_timeout(std::time::Duration::from_millis(100)) {
            if want(&l) {
                return;
            }
        }
        assert!(std::time::Instant::now() < deadline, "no {what}");
    }
}

/// OpenSSL's DTLS 1.2 server with PSK-AES128-CCM8 (TLS_PSK_WITH_AES_128_CCM_8) over real UDP
/// on loopback: the C client completes the handshake, its record reaches OpenSSL, and
/// OpenSSL's reaches it.
#[test]
fn interop_with_openssl_s_server_psk_ccm8() {
    use std::io::Write;
    use std::process::{Command, Stdio};

    let port = free_udp_port();
    let mut server = Command::new("openssl")
        .args([
            "s_server",
            "-dtls1_2",
            "-nocert",
            "-cipher",
            "PSK-AES128-CCM8",
        ])
        .args(["-psk", &key_hex(), "-psk_identity", "sensor-1"])
        .args(["-accept", &format!("127.0.0.1:{port}"), "-naccept", "1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl is installed (scripts/install-test-deps)");
    let lines = lines_of(server.stdout.take().unwrap());
    wait_for(&lines, "ACCEPT from openssl s_server", |l| l == "ACCEPT");

    let mut udp = Udp::connect(port);
    let mut client = Client::new(8);
    let mut cfg = psk_config(SENSOR_PSK.identity, SENSOR_PSK.key);
    cfg.initial_timeout_ms = 300;
    assert_eq!(client.connect(&cfg, udp.ms()), sigil_status::SIGIL_OK);
    udp.exchange(&mut client, &|c, _| c.info().established);
    println!(
        "with openssl s_server: handshake sent {:?}, received {:?} (datagrams, bytes)",
        udp.sent, udp.received
    );

    // The client's record: s_server writes what it decrypts to its stdout.
    let line = b"hello from the C client\n";
    assert_eq!(client.send(line), sigil_status::SIGIL_OK);
    udp.flush(&mut client);
    wait_for(&lines, "client record printed by openssl", |l| {
        l == "hello from the C client"
    });
    // OpenSSL's record: a line on s_server's stdin goes to the client.
    let mut stdin = server.stdin.take().unwrap();
    stdin.write_all(b"hello from openssl\n").unwrap();
    stdin.flush().unwrap();
    let got = udp.exchange(&mut client, &|_, got| !got.is_empty());
    assert_eq!(got, [b"hello from openssl\n".to_vec()]);
    let _ = server.kill();
    let _ = server.wait();
}

/// GnuTLS's DTLS 1.2 echo server with TLS_PSK_WITH_AES_128_CCM_8 only: the C client's record
/// comes back from it.
#[test]
fn interop_with_gnutls_serv_psk_ccm8() {
    use std::process::{Command, Stdio};

    let dir = tempfile::tempdir().unwrap();
    let passwd = dir.path().join("psk.txt");
    std::fs::write(&passwd, format!("sensor-1:{}\n", key_hex())).unwrap();
    let port = free_udp_port();
    let mut server = Command::new("gnutls-serv")
        .args(["--udp", "--echo", "--nodb", "--disable-client-cert"])
        .arg(format!("--pskpasswd={}", passwd.display()))
        .arg("--priority=NONE:+VERS-DTLS1.2:+PSK:+AES-128-CCM-8:+AEAD:+SIGN-ALL:+COMP-NULL:+CURVE-ALL")
        .arg(format!("--port={port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("gnutls-serv is installed (scripts/install-test-deps)");
    // It prints through a buffer: wait until its socket holds the port instead.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "gnutls-serv did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }

    let mut udp = Udp::connect(port);
    let mut client = Client::new(9);
    let mut cfg = psk_config(SENSOR_PSK.identity, SENSOR_PSK.key);
    cfg.initial_timeout_ms = 300;
    assert_eq!(client.connect(&cfg, udp.ms()), sigil_status::SIGIL_OK);
    udp.exchange(&mut client, &|c, _| c.info().established);
    println!(
        "with gnutls-serv: handshake sent {:?}, received {:?} (datagrams, bytes)",
        udp.sent, udp.received
    );
    let post = [0x42u8, 0x02, 0x12, 0x34, 0xab, 0xcd, 0xb2, b'p', b's'];
    assert_eq!(client.send(&post), sigil_status::SIGIL_OK);
    let got = udp.exchange(&mut client, &|_, got| !got.is_empty());
    assert_eq!(got, [post.to_vec()]);
    let _ = server.kill();
    let _ = server.wait();
}

/// The C device's default key is Ed25519: it authenticates the client in the ECDHE-ECDSA
/// handshake too (RFC 8422 §5.4: EdDSA in CertificateVerify), next to the server's P-256 key.
#[test]
fn ecdhe_ecdsa_with_an_ed25519_device_key() {
    let device = SecretKey::from_bytes(SignatureAlgorithm::Ed25519, &[0x33; 32]).unwrap();
    let r = ecdhe_ecdsa(&device, sigil_alg::SIGIL_ALG_ED25519, None, 10);
    assert!(r.info.established && r.server_established, "{:?}", r.info);
    println!(
        "ECDHE-ECDSA-CCM8 with an Ed25519 device key: {:?}",
        r.traffic
    );
    assert_eq!(r.server_saw, Some(r.device_public));
}

/// With `connection_id`, the client offers RFC 9146 and, once Sigil's server gives it an ID,
/// puts it in every protected record (content type tls12_cid, 25).
#[test]
fn the_connection_id_goes_into_the_clients_records() {
    let mut client = Client::new(11);
    let mut cfg = psk_config(SENSOR_PSK.identity, SENSOR_PSK.key);
    cfg.connection_id = true;
    assert_eq!(client.connect(&cfg, 0), sigil_status::SIGIL_OK);
    let offer = ServerCredentials {
        psk: true,
        connection_id: b"\xc1\xd0",
        ..ServerCredentials::NONE
    };
    let mut server = Server::new(SENSOR_PSK, offer);
    let (now, _) = handshake(&mut client, &mut server);
    assert_eq!(client.send(b"with a cid"), sigil_status::SIGIL_OK);
    let records = client.transmit(now);
    assert_eq!(records.len(), 1);
    assert_eq!(records[0][0], 25, "tls12_cid");
    assert_eq!(
        &records[0][11..13],
        b"\xc1\xd0",
        "the server's connection ID"
    );
    server
        .conn()
        .handle_datagram(Instant::from_millis(now), &records[0])
        .unwrap();
    let mut buf = [0u8; 64];
    let n = server.conn().poll_app_data(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"with a cid");
}
