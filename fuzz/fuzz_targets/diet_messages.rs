//! The CryptoDiet node's intake: arbitrary bytes as a datagram (a hello, trusted or not, or a
//! data message) before and after a real session exists, from a known address and a new one.
//! Nothing may panic, and nothing forged is accepted as a message.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sigil_crypto::{CryptoError, Rng, RustCrypto};
use sigil_diet::{wire, Config, Node, NodeKeys, Received, HELLO_LEN};
use sigil_time::Instant;

struct Fixed(u8);
impl Rng for Fixed {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), CryptoError> {
        for b in buf {
            self.0 = self.0.wrapping_mul(37).wrapping_add(11);
            *b = self.0;
        }
        Ok(())
    }
}

fn node(seed: u8) -> Node<RustCrypto, u8, 2> {
    let keys = NodeKeys::generate(&RustCrypto, &mut Fixed(seed)).unwrap();
    Node::new(RustCrypto, keys, 1, Config::default())
}

fuzz_target!(|data: &[u8]| {
    // The views never panic on what they accept.
    if let Ok(h) = wire::Hello::parse(data) {
        let _ = (
            h.ack(),
            h.epoch(),
            h.nonce(),
            h.echo(),
            h.ecdh_public(),
            h.signing_public(),
        );
        let _ = (h.signed(), h.signature());
    }
    if let Ok(d) = wire::Data::parse(data) {
        let _ = (
            d.seq(),
            d.header(),
            d.ciphertext(),
            d.tag(),
            d.signed(),
            d.signature(),
        );
    }
    let mut a = node(1);
    let mut b = node(2);
    let mut out = [0u8; 2048];
    let t0 = Instant::ZERO;
    let r = b.handle(t0, 1, data, |_, _| true, &mut out);
    assert!(
        !matches!(
            r,
            Ok(Received::Message { .. } | Received::Hello { new_keys: true })
        ),
        "no session yet"
    );
    assert_eq!(
        b.neighbours().count(),
        0,
        "a slot before any address proved itself"
    );
    // A real session (hello, challenge, acknowledgement), then the input as a datagram from
    // the peer and from a stranger.
    let (ka, kb) = (a.signing_key(), b.signing_key());
    let mut h = [0u8; HELLO_LEN];
    let mut b = node(2);
    a.add_neighbour(t0, 2).unwrap();
    let t = a.poll_transmit(t0, &mut h).unwrap();
    assert_eq!(
        b.handle(t0, 1, &h[..t.len], |_, k| *k == ka, &mut out),
        Ok(Received::Challenged)
    );
    let t = b.poll_transmit(t0, &mut h).unwrap();
    a.handle(t0, 2, &h[..t.len], |_, k| *k == kb, &mut out)
        .unwrap();
    let t = a.poll_transmit(t0, &mut h).unwrap();
    b.handle(t0, 1, &h[..t.len], |_, k| *k == ka, &mut out)
        .unwrap();
    let r = b.handle(t0, 1, data, |_, k| *k == ka, &mut out);
    assert!(
        !matches!(r, Ok(Received::Message { .. })),
        "forged data accepted"
    );
    let r = b.handle(t0, 3, data, |_, k| *k == ka, &mut out);
    assert!(
        !matches!(r, Ok(Received::Message { .. } | Received::Moved { .. })),
        "a stranger moved a neighbour"
    );
    let _ = b.poll_transmit(t0, &mut h);
});
