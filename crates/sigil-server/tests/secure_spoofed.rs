//! The coaps:// layer with a forger who knows an established client's address (UDP source
//! addresses are not authenticated): plaintext records sent in the client's name must not end
//! its session, nor move its replay window, and the client's own records keep flowing.

use sigil_crypto::RustCrypto;
use sigil_dtls::{Config, Connection, Credentials, NoTrust};
use sigil_server::secure::SecureLayer;
use sigil_server::Stats;
use sigil_testkit::Seeded;
use sigil_time::UnixTime;
use std::net::SocketAddr;

const UNIX: UnixTime = UnixTime::from_secs(1_700_000_000);
const PSK: &[u8; 16] = b"0123456789abcdef";

use common::ms;
use sigil_testkit::server as common;

/// A server layer with one PSK identity provisioned, and a client of that identity at
/// `addr` with an established session.
fn session(addr: SocketAddr) -> (SecureLayer, Connection<RustCrypto, NoTrust>, Seeded) {
    let (mut layer, id) = common::one_psk_layer(PSK, Stats::default());
    let text = id.to_string();
    let mut client = Connection::connect(
        RustCrypto,
        NoTrust,
        Config::default(),
        &mut Seeded(11),
        Credentials::Psk {
            identity: text.as_bytes(),
            key: PSK,
        },
        ms(0),
    )
    .unwrap();
    let mut rng = Seeded(1234);
    let mut buf = [0u8; 2048];
    for _ in 0..10 {
        let mut out = vec![];
        while let Some(n) = client.poll_transmit(ms(1), &mut buf) {
            layer.handle_datagram(ms(1), UNIX, &mut rng, addr, &buf[..n], &mut out);
        }
        for (to, d) in out {
            assert_eq!(to, addr);
            client.handle_datagram(ms(1), &d).unwrap();
        }
    }
    assert!(client.is_established());
    assert_eq!(layer.sessions(), 1);
    (layer, client, rng)
}

fn record(content_type: u8, epoch: u16, seq: u64, body: &[u8]) -> Vec<u8> {
    let mut r = vec![content_type, 0xfe, 0xfd];
    r.extend_from_slice(&epoch.to_be_bytes());
    r.extend_from_slice(&seq.to_be_bytes()[2..]);
    r.extend_from_slice(&(body.len() as u16).to_be_bytes());
    r.extend_from_slice(body);
    r
}

/// The client's next CoAP message reaches the server, delivered with the session's identity.
fn client_still_heard(
    layer: &mut SecureLayer,
    client: &mut Connection<RustCrypto, NoTrust>,
    rng: &mut Seeded,
    addr: SocketAddr,
    message: &[u8],
) {
    client.send(message).unwrap();
    let mut buf = [0u8; 2048];
    let n = client.poll_transmit(ms(3), &mut buf).unwrap();
    let mut out = vec![];
    let got = layer.handle_datagram(ms(3), UNIX, rng, addr, &buf[..n], &mut out);
    assert_eq!(got.len(), 1, "the session lost the client's record");
    assert_eq!(got[0].message, message);
    assert!(got[0].auth.is_some());
}

#[test]
fn forged_plaintext_records_do_not_end_a_session() {
    let addr: SocketAddr = "10.0.0.7:40007".parse().unwrap();
    for forged in [
        record(23, 0, 5, b"\x40\x01\x00\x01"), // application data
        record(99, 0, 6, b"x"),                // unknown content type
        record(21, 0, 7, &[2, 10]),            // fatal alert
        record(22, 0, 8, &[0u8; 1500]),        // longer than any datagram of ours
        record(23, 1, 9, &[0u8; 1500]),        // "protected", too long to check
    ] {
        let (mut layer, mut client, mut rng) = session(addr);
        let mut out = vec![];
        let got = layer.handle_datagram(ms(2), UNIX, &mut rng, addr, &forged, &mut out);
        assert!(got.is_empty());
        assert!(out.is_empty(), "the server answered a forged record");
        assert_eq!(layer.sessions(), 1, "a forged record ended the session");
        client_still_heard(&mut layer, &mut client, &mut rng, addr, b"\x40\x01\x00\x02");
    }
}

#[test]
fn a_forged_record_with_a_far_sequence_number_does_not_move_the_replay_window() {
    let addr: SocketAddr = "10.0.0.8:40008".parse().unwrap();
    let (mut layer, mut client, mut rng) = session(addr);
    let mut out = vec![];
    // Epoch 1, sequence number far ahead of the client's: fails authentication.
    let forged = record(23, 1, 1 << 40, &[0u8; 40]);
    layer.handle_datagram(ms(2), UNIX, &mut rng, addr, &forged, &mut out);
    assert_eq!(layer.sessions(), 1);
    client_still_heard(&mut layer, &mut client, &mut rng, addr, b"\x40\x01\x00\x03");
}
