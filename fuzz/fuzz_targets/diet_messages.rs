//! The CryptoDiet scheme's two parsers: arbitrary bytes as a hello (trusted key or not) and as
//! a data message, before and after a real session exists. Nothing may panic, and nothing
//! forged is accepted.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sigil_crypto::{CryptoError, Rng, RustCrypto};
use sigil_diet::{Node, HELLO_LEN};

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

fuzz_target!(|data: &[u8]| {
    let mut a = Node::new(RustCrypto, &mut Fixed(1)).unwrap();
    let mut b = Node::new(RustCrypto, &mut Fixed(2)).unwrap();
    let mut out = [0u8; 2048];
    assert!(b.open(data, &mut out).is_err(), "no session yet");
    let _ = b.handle_hello(data, |_| true);
    // A real session, then the input as a data message.
    let (ka, kb) = (a.signing_key(), b.signing_key());
    let mut h = [0u8; HELLO_LEN];
    a.hello(&mut h).unwrap();
    b.handle_hello(&h, |k| *k == ka).unwrap();
    b.hello(&mut h).unwrap();
    a.handle_hello(&h, |k| *k == kb).unwrap();
    assert!(b.open(data, &mut out).is_err(), "forged data accepted");
});
