//! `DELETE /dtls/<id>` of a session established over the CoAP carrier answers 4.05, as
//! docs/wire-formats.md says (an established session ends with its authenticated
//! `close_notify`, never a forgeable CoAP request): while the carrier's slot still holds the
//! handshake's last answer, and after that slot has gone. It used to answer 4.04 (issue 25,
//! finding 9). In memory against the server's DTLS layer, virtual time.

use sigil_coap::{Code, Message, MessageBuilder, MessageType};
use sigil_crypto::RustCrypto;
use sigil_dtls::Credentials;
use sigil_dtls_coap::{CarrierConfig, Client as CoapClient};
use sigil_server::secure::SecureLayer;
use sigil_server::Stats;
use sigil_testkit::Seeded;
use sigil_time::UnixTime;
use std::net::SocketAddr;

const UNIX: UnixTime = UnixTime::from_secs(1_700_000_000);
const PSK: &[u8; 16] = b"0123456789abcdef";

use common::{ms, AnyServer};
use sigil_testkit::server as common;

fn delete(mid: u16, id: u32) -> Vec<u8> {
    let mut buf = [0u8; 64];
    let mut b =
        MessageBuilder::new(&mut buf, MessageType::Confirmable, Code::DELETE, mid, &[9]).unwrap();
    b.uri_path(&format!("dtls/{id}")).unwrap();
    let n = b.finish();
    buf[..n].to_vec()
}

#[test]
fn delete_of_an_established_carrier_session_answers_4_05_as_documented() {
    let stats = Stats::default();
    let (mut layer, id) = common::one_psk_layer(PSK, stats.clone());
    let addr: SocketAddr = "10.0.0.9:40009".parse().unwrap();
    let text = id.to_string();
    let mut rng = Seeded(1234);
    let mut crng = Seeded(11);
    let mut client = CoapClient::connect(
        RustCrypto,
        AnyServer,
        CarrierConfig::default(),
        &mut crng,
        Credentials::Psk {
            identity: text.as_bytes(),
            key: PSK,
        },
        ms(0),
    )
    .unwrap();
    let mut buf = [0u8; 2048];
    for _ in 0..20 {
        let mut out = vec![];
        while let Some(n) = client.poll_transmit(ms(1), &mut buf) {
            layer.handle_datagram(ms(1), UNIX, &mut rng, addr, &buf[..n], &mut out);
        }
        for (_, d) in out {
            client.handle_datagram(ms(1), &d, &mut crng).unwrap();
        }
        if client.is_established() {
            break;
        }
    }
    assert!(client.is_established());
    assert_eq!(layer.sessions(), 1);
    let sid = client.session_id().unwrap();

    let answer = |layer: &mut SecureLayer, rng: &mut Seeded, now: u64, mid: u16| {
        let mut out = vec![];
        layer.handle_datagram(ms(now), UNIX, rng, addr, &delete(mid, sid), &mut out);
        layer.handle_timeout(ms(now), UNIX, &mut out);
        let codes: Vec<Code> = out
            .iter()
            .filter_map(|(_, d)| Message::parse(d).ok().map(|m| m.code))
            .collect();
        codes
    };
    // While the carrier's slot keeps the handshake's last answer.
    assert_eq!(
        answer(&mut layer, &mut rng, 2, 0x7000),
        vec![Code::METHOD_NOT_ALLOWED]
    );
    // Long after it (the slot's 45 s), the session still lives (idle for an hour).
    assert_eq!(
        answer(&mut layer, &mut rng, 120_000, 0x7001),
        vec![Code::METHOD_NOT_ALLOWED]
    );
    assert_eq!(
        layer.sessions(),
        1,
        "the session was not ended by a CoAP DELETE"
    );
    layer.publish();
    assert_eq!(stats.get("dtls_coap.wrong_method"), 2);
    assert_eq!(stats.get("dtls_coap.delete_of_established"), 2);
}
