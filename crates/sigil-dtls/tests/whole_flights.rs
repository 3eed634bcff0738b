//! The handshake driven by whole flights (`WholeFlights`, the carrier of sigil-dtls-coap),
//! client and server in memory: the same states and the same established `Traffic` as the
//! record carrier, and the strict intake a whole-flight carrier owes.

use sigil_crypto::RustCrypto;
use sigil_dtls::record::Records;
use sigil_dtls::wire::ContentType;
use sigil_dtls::{
    Config, CookieKey, Credentials, Error, NoTrust, ServerCredentials, State, Stateless,
    WholeFlights,
};
use sigil_testkit::dtls::{at, OnePsk, SENSOR_PSK};
use sigil_testkit::Counter;

const PSK_ONLY: ServerCredentials<'static> = ServerCredentials {
    psk: true,
    ..ServerCredentials::NONE
};
const PEER: &[u8] = b"[fe80::1]:5683";

type Client = WholeFlights<RustCrypto, NoTrust>;
type Server = WholeFlights<RustCrypto, OnePsk>;

/// Up to the server's first flight: the ClientHello, the stateless HelloVerifyRequest, the
/// ClientHello with the cookie. Returns both sides and the server's flight.
fn start() -> (Client, Server, Vec<u8>) {
    let mut out = [0u8; 2048];
    let (mut client, n) = Client::connect(
        RustCrypto,
        NoTrust,
        Config::default(),
        &mut Counter::new(1, 37),
        Credentials::Psk {
            identity: SENSOR_PSK.identity,
            key: SENSOR_PSK.key,
        },
        &mut out,
    )
    .unwrap();
    let ch1 = out[..n].to_vec();
    let cookies = CookieKey::new([7; 32]);
    let mut hvr = [0u8; 256];
    let Stateless::HelloVerify(h) = cookies.respond(&RustCrypto, PEER, &ch1, &mut hvr) else {
        panic!("no HelloVerifyRequest");
    };
    assert!(h <= ch1.len(), "no amplification");
    let n = client.handle_flight(&hvr[..h], &mut out).unwrap();
    let ch2 = out[..n].to_vec();
    let Stateless::Accept(proof) = cookies.respond(&RustCrypto, PEER, &ch2, &mut hvr) else {
        panic!("the cookie was not accepted");
    };
    let (server, n) = Server::accept(
        RustCrypto,
        SENSOR_PSK,
        Config::default(),
        &PSK_ONLY,
        &mut Counter::new(200, 37),
        proof,
        &ch2,
        &mut out,
    )
    .unwrap();
    (client, server, out[..n].to_vec())
}

/// Every handshake message of a flight sits whole in its record: no fragment headers with an
/// offset, one record per message.
fn assert_whole(flight: &[u8]) {
    for rec in Records::new(flight) {
        let rec = rec.unwrap();
        if rec.header.content_type == ContentType::HANDSHAKE && rec.header.epoch == 0 {
            let (f, rest) = sigil_dtls::handshake::Fragment::parse(rec.fragment).unwrap();
            assert!(f.is_whole() && rest.is_empty());
        }
    }
}

#[test]
fn psk_handshake_over_whole_flights_ends_in_the_same_traffic() {
    let (mut client, mut server, flight4) = start();
    assert_whole(&flight4);
    assert_eq!(client.state(), State::ExpectHelloVerifyOrServerHello);
    let mut out = [0u8; 2048];
    let n = client.handle_flight(&flight4, &mut out).unwrap();
    assert!(n > 0);
    let flight5 = out[..n].to_vec();
    assert_whole(&flight5);
    assert_eq!(client.state(), State::ExpectChangeCipherSpec);
    let n = server.handle_flight(&flight5, &mut out).unwrap();
    assert!(server.is_established());
    let flight6 = out[..n].to_vec();
    assert_eq!(client.handle_flight(&flight6, &mut out), Ok(0));
    assert!(client.is_established());
    // A flight after the handshake is refused.
    assert!(client.handle_flight(&flight6, &mut out).is_err());

    let mut c = client.into_traffic().ok().unwrap();
    let mut s = server.into_traffic().ok().unwrap();
    assert_eq!(s.psk_identity(), b"sensor-1");
    c.send(b"hello over records").unwrap();
    let mut d = [0u8; 1500];
    let n = c.poll_transmit(at(70), &mut d).unwrap();
    s.handle_datagram(at(70), &d[..n]).unwrap();
    let m = s.poll_app_data(&mut d).unwrap();
    assert_eq!(&d[..m], b"hello over records");
    s.send(b"and back").unwrap();
    let n = s.poll_transmit(at(80), &mut d).unwrap();
    c.handle_datagram(at(80), &d[..n]).unwrap();
    let m = c.poll_app_data(&mut d).unwrap();
    assert_eq!(&d[..m], b"and back");
}

#[test]
fn a_flight_handed_over_twice_fails_the_handshake() {
    let (mut client, _server, flight4) = start();
    let mut out = [0u8; 2048];
    client.handle_flight(&flight4, &mut out).unwrap();
    // The same ServerHello again: not the message expected next.
    assert!(client.handle_flight(&flight4, &mut out).is_err());
    assert!(matches!(client.state(), State::Failed(_)));
}

#[test]
fn a_fragmented_message_is_refused() {
    let (mut client, _server, flight4) = start();
    // Cut the first record's handshake message in two fragments, each in its own record.
    let (rec, rest) = sigil_dtls::record::Record::parse(&flight4).unwrap();
    let (f, _) = sigil_dtls::handshake::Fragment::parse(rec.fragment).unwrap();
    let mut cut = Vec::new();
    for (i, (off, body)) in [(0, &f.body[..10]), (10, &f.body[10..])].iter().enumerate() {
        let mut plain = [0u8; 512];
        let mut w = sigil_dtls::Writer::new(&mut plain);
        sigil_dtls::handshake::Fragment {
            offset: *off,
            body,
            ..f
        }
        .write(&mut w)
        .unwrap();
        let len = w.len();
        let mut hdr = rec.header;
        hdr.sequence += i as u64 * 100;
        hdr.length = len as u16;
        let mut h = [0u8; 13];
        hdr.write(&mut sigil_dtls::Writer::new(&mut h)).unwrap();
        cut.extend_from_slice(&h);
        cut.extend_from_slice(&plain[..len]);
    }
    cut.extend_from_slice(rest);
    let mut out = [0u8; 2048];
    assert_eq!(
        client.handle_flight(&cut, &mut out),
        Err(Error::Decode("a fragmented handshake message"))
    );
}

/// The whole-flight carrier holds no send queue, reassembly buffer, messages kept ahead or
/// timer: its handshaking state is smaller than the record carrier's by at least the
/// reassembly buffer and the send queue.
#[test]
fn the_whole_flight_handshake_is_smaller_than_the_record_carriers() {
    use core::mem::size_of;
    let whole = size_of::<WholeFlights<(), NoTrust>>();
    let record = size_of::<sigil_dtls::Connection<(), NoTrust>>();
    println!("handshaking: whole flights {whole} bytes, record carrier {record} bytes");
    assert!(whole + sigil_dtls::flight::MAX_MESSAGE + sigil_dtls::flight::MAX_FLIGHT < record);
}
