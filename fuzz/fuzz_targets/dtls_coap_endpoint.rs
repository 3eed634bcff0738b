//! The DTLS-over-CoAP endpoint (sigil-dtls-coap) fed arbitrary datagrams from a few peer
//! addresses, with expiry in between. A deterministic test-only crypto provider makes every
//! cookie, MAC and Finished predictable (HMAC is all zeros, CCM-8 the identity with an all-zero
//! tag), so inputs get past the cookie into the session resources. Input: datagrams, each
//! prefixed by a control byte (the peer; bit 7: the caller's admission check says no; bit 6:
//! the caller takes established sessions out afterwards) and a 2-byte length. Checked on every
//! step: the table's bounds, and no answer to a cookie-less `PUT /dtls` larger than its
//! request.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sigil_coap::{Code, Message};
use sigil_dtls::ServerCredentials;
use sigil_dtls_coap::{Endpoint, EndpointConfig, MAX_DATAGRAM};

#[path = "../common/dtls.rs"]
mod common;
use common::{Fixed, Keys, Transparent};

const PEERS: [&[u8]; 3] = [b"[2001:db8::1]:1", b"[2001:db8::2]:1", b"10.0.0.3:5683"];

fuzz_target!(|data: &[u8]| {
    let offer = ServerCredentials {
        psk: true,
        ..ServerCredentials::NONE
    };
    let config = EndpointConfig {
        max_per_peer: 2,
        block_szx: 2,
        ..EndpointConfig::default()
    };
    let mut endpoint: Endpoint<'_, Transparent, &Keys, 3> =
        Endpoint::new(Transparent, &Keys, offer, config, [0; 32]);
    let mut out = [0u8; MAX_DATAGRAM];
    let mut rest = data;
    let mut now = 0u64;
    while rest.len() >= 3 {
        let control = rest[0];
        let peer = PEERS[usize::from(control & 0x3f) % PEERS.len()];
        let n = (usize::from(rest[1]) << 8 | usize::from(rest[2])).min(rest.len() - 3);
        let d = &rest[3..3 + n];
        rest = &rest[3 + n..];
        now += u64::from(n as u8) * 1000;
        let t = sigil_time::Instant::from_millis(now);
        let mut admit = |p: &[u8]| {
            assert_eq!(p, peer);
            control & 0x80 == 0
        };
        let answer =
            endpoint.handle_datagram_with(t, peer, d, &offer, &mut admit, &mut Fixed, &mut out);
        if let Some(r) = answer {
            assert!(r <= out.len());
            let reply = Message::parse(&out[..r]).expect("the endpoint writes valid CoAP");
            if reply.code == Code::UNAUTHORIZED {
                assert!(r <= d.len(), "amplification: {r} bytes for {}", d.len());
            }
        }
        assert!(endpoint.sessions() <= 3);
        if control & 0x40 != 0 {
            while let Some(est) = endpoint.take_established() {
                assert!(PEERS.contains(&est.peer()));
            }
        }
        endpoint.handle_timeout(t);
    }
});
