//! The DTLS server the firmware's DTLS client image talks to in the emulator
//! (`firmware/src/bin/dtls_client.rs`, run by `tools/devbench/dtls_carriers.py`): the real
//! sigil-dtls server, with the handshake carried by the record layer (`records`: the stateless
//! cookie exchange, then `Connection::accept`) or as a CoAP resource (`coap`:
//! `sigil_dtls_coap::Endpoint`, whose established sessions it takes over). It offers TLS_PSK_WITH_AES_128_CCM_8 (identity `sensor`,
//! `DTLS_PSK`) and TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8 with its raw public key
//! (`dtls_server_key`), and answers each Confirmable CoAP request that arrives in an
//! application record with a piggybacked 2.04 in one.
//!
//! Datagrams come in on stdin and go out on stdout, each framed by its 2-byte big-endian
//! length; the answers to one datagram end with an empty frame. At the end of its input it
//! writes one line to stderr: `handshakes <n> requests <m>`.
//!
//! ```text
//! cargo run -p sigil-devbench --example dtls-peer -- records|coap
//! ```

use sigil_coap::{Code, Message, MessageBuilder, MessageType};
use sigil_crypto::{RustCrypto, SecretKey};
use sigil_devbench::{dtls_server_key, BenchRng, DTLS_PSK};
use sigil_dtls::{
    Config, Connection, CookieKey, ServerCredentials, Stateless, Traffic, Trust, MAX_APP_DATA,
};
use sigil_dtls_coap::{Endpoint, EndpointConfig};
use sigil_time::Instant;
use std::io::{self, BufWriter, Read, Write};

/// The device's address as the server sees it (binds the cookie and the session resource).
const DEVICE: &[u8] = b"[fe80::2]:5684";

/// The device's PSK, known by its identity.
#[derive(Clone, Copy)]
struct DevicePsk;

impl Trust for DevicePsk {
    fn psk(&self, identity: &[u8], key: &mut [u8; 64]) -> Option<usize> {
        (identity == b"sensor").then(|| {
            key[..DTLS_PSK.len()].copy_from_slice(&DTLS_PSK);
            DTLS_PSK.len()
        })
    }
}

fn offer(key: &SecretKey) -> ServerCredentials<'_> {
    ServerCredentials {
        psk: true,
        key: Some(key),
        require_client_key: false,
        ..ServerCredentials::NONE
    }
}

/// What happened, for the harness to check.
#[derive(Default)]
struct Tally {
    handshakes: u64,
    requests: u64,
}

/// The 2.04 for a Confirmable request, or `None` for anything else.
fn answer(request: &[u8], tally: &mut Tally) -> Option<Vec<u8>> {
    let req = Message::parse(request).ok()?;
    if req.mtype != MessageType::Confirmable || !req.code.is_request() {
        return None;
    }
    tally.requests += 1;
    let mut out = [0u8; 64];
    let m = MessageBuilder::new(
        &mut out,
        MessageType::Acknowledgement,
        Code::CHANGED,
        req.message_id,
        req.token,
    )
    .ok()?;
    let n = m.finish_with_payload(&[]).ok()?;
    Some(out[..n].to_vec())
}

/// Application records in, answers out, through an established session.
fn serve_records(
    traffic: &mut Traffic<RustCrypto>,
    now: Instant,
    datagram: &[u8],
    tally: &mut Tally,
) -> Vec<Vec<u8>> {
    if let Err(e) = traffic.handle_datagram(now, datagram) {
        eprintln!("record refused: {e:?}");
        return vec![];
    }
    let mut app = [0u8; MAX_APP_DATA];
    while let Some(n) = traffic.poll_app_data(&mut app) {
        if let Some(reply) = answer(&app[..n], tally) {
            if let Err(e) = traffic.send(&reply) {
                eprintln!("answer not sent: {e:?}");
            }
        }
    }
    let mut out = vec![];
    let mut d = [0u8; 1500];
    while let Some(n) = traffic.poll_transmit(now, &mut d) {
        out.push(d[..n].to_vec());
    }
    out
}

/// Whether a datagram opens a handshake: a plaintext (epoch 0) record holding a ClientHello.
fn opens_handshake(datagram: &[u8]) -> bool {
    datagram.len() > 13 && datagram[0] == 22 && datagram[3..5] == [0, 0] && datagram[13] == 1
}

/// The record-layer server: one connection at a time, a new one for each ClientHello that
/// comes back with a valid cookie once the previous handshake is over.
struct RecordServer<'k> {
    key: &'k SecretKey,
    cookies: CookieKey,
    rng: BenchRng,
    connection: Option<Connection<RustCrypto, DevicePsk>>,
    counted: bool,
}

impl RecordServer<'_> {
    fn handle(&mut self, now: Instant, datagram: &[u8], tally: &mut Tally) -> Vec<Vec<u8>> {
        let idle = self.connection.as_ref().is_none_or(|c| c.is_established());
        if idle && opens_handshake(datagram) {
            let mut out = [0u8; 512];
            match self
                .cookies
                .respond(&RustCrypto, DEVICE, datagram, &mut out)
            {
                Stateless::HelloVerify(n) => return vec![out[..n].to_vec()],
                Stateless::Drop(e) => {
                    eprintln!("ClientHello dropped: {e:?}");
                    return vec![];
                }
                Stateless::Accept(cookie) => {
                    match Connection::accept(
                        RustCrypto,
                        DevicePsk,
                        Config::default(),
                        &offer(self.key),
                        &mut self.rng,
                        cookie,
                        datagram,
                        now,
                    ) {
                        Ok(c) => {
                            self.connection = Some(c);
                            self.counted = false;
                        }
                        Err(e) => {
                            eprintln!("handshake refused: {e:?}");
                            return vec![];
                        }
                    }
                }
            }
        } else if let Some(c) = self.connection.as_mut() {
            if let Err(e) = c.handle_datagram(now, datagram) {
                eprintln!("handshake failed: {e:?}");
            }
        }
        let Some(c) = self.connection.as_mut() else {
            return vec![];
        };
        let mut out = vec![];
        let mut d = [0u8; 1500];
        while let Some(n) = c.poll_transmit(now, &mut d) {
            out.push(d[..n].to_vec());
        }
        if c.is_established() && !self.counted {
            self.counted = true;
            tally.handshakes += 1;
        }
        let mut app = [0u8; MAX_APP_DATA];
        while let Some(n) = c.poll_app_data(&mut app) {
            if let Some(reply) = answer(&app[..n], tally) {
                if let Err(e) = c.send(&reply) {
                    eprintln!("answer not sent: {e:?}");
                }
            }
        }
        while let Some(n) = c.poll_transmit(now, &mut d) {
            out.push(d[..n].to_vec());
        }
        out
    }
}

fn read_frame(input: &mut impl Read) -> io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 2];
    match input.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let mut d = vec![0u8; usize::from(u16::from_be_bytes(len))];
    input.read_exact(&mut d)?;
    Ok(Some(d))
}

fn write_frames(output: &mut impl Write, frames: &[Vec<u8>]) -> io::Result<()> {
    for f in frames {
        let len = u16::try_from(f.len()).map_err(|_| io::Error::other("datagram too long"))?;
        output.write_all(&len.to_be_bytes())?;
        output.write_all(f)?;
    }
    output.write_all(&[0, 0])?;
    output.flush()
}

fn main() -> io::Result<()> {
    let carrier = std::env::args().nth(1).unwrap_or_default();
    let key = dtls_server_key().map_err(|e| io::Error::other(format!("{e:?}")))?;
    let mut input = io::stdin().lock();
    let mut output = BufWriter::new(io::stdout().lock());
    let mut tally = Tally::default();
    let mut now = Instant::ZERO;
    match carrier.as_str() {
        "records" => {
            let mut server = RecordServer {
                key: &key,
                cookies: CookieKey::new([9; 32]),
                rng: BenchRng(2),
                connection: None,
                counted: false,
            };
            while let Some(d) = read_frame(&mut input)? {
                now += std::time::Duration::from_millis(1);
                let out = server.handle(now, &d, &mut tally);
                write_frames(&mut output, &out)?;
            }
        }
        "coap" => {
            let mut endpoint: Endpoint<'_, RustCrypto, DevicePsk, 4> = Endpoint::new(
                RustCrypto,
                DevicePsk,
                offer(&key),
                EndpointConfig::default(),
                [9; 32],
            );
            let mut rng = BenchRng(2);
            // The latest session the endpoint handed over: the device's records go to it.
            let mut session: Option<Traffic<RustCrypto>> = None;
            while let Some(d) = read_frame(&mut input)? {
                now += std::time::Duration::from_millis(1);
                let out = if sigil_dtls_coap::is_dtls_record(&d) {
                    match session.as_mut() {
                        Some(traffic) => serve_records(traffic, now, &d, &mut tally),
                        None => vec![],
                    }
                } else {
                    let mut reply = [0u8; sigil_dtls_coap::MAX_DATAGRAM];
                    endpoint
                        .handle_datagram(now, DEVICE, &d, &mut rng, &mut reply)
                        .map(|n| vec![reply[..n].to_vec()])
                        .unwrap_or_default()
                };
                while let Some(established) = endpoint.take_established() {
                    session = Some(established.traffic);
                }
                tally.handshakes = endpoint.counters().established;
                write_frames(&mut output, &out)?;
            }
        }
        other => {
            return Err(io::Error::other(format!(
                "carrier {other:?}: expected records or coap"
            )))
        }
    }
    eprintln!(
        "handshakes {} requests {}",
        tally.handshakes, tally.requests
    );
    Ok(())
}
