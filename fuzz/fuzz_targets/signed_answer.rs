#![no_main]
//! Signed answers (`sigil_objects::answer`): read any bytes as a CoAP answer, take its
//! signature option and check it as a device does, under a fixed server key, for a fixed
//! request; nothing the fuzzer makes may verify or panic. The statement of any token and
//! Location-Path is built within its bounds.
use libfuzzer_sys::fuzz_target;
use sigil_coap::Message;
use sigil_crypto::{CryptoProvider, RustCrypto, SecretKey, SignatureAlgorithm};
use sigil_identity::Identity;
use sigil_objects::answer::{signature_of, Answer, RequestDigest, MAX_STATEMENT_LEN};

fuzz_target!(|data: &[u8]| {
    let key = SecretKey::from_bytes(SignatureAlgorithm::Ed25519, &[0x22; 32]).unwrap();
    let public = RustCrypto.public_key(&key).unwrap();
    let device = Identity::of_key(&RustCrypto, &public, b"").unwrap();
    let Ok(msg) = Message::parse(data) else {
        return;
    };
    let options = msg.options().map(|o| (o.number, o.value));
    let request = RequestDigest::of(&RustCrypto, 2, options.clone(), msg.payload);
    let answer = Answer {
        device: &device,
        token: msg.token,
        code: msg.code.0,
        request: &request,
    };
    let _ = signature_of(options.clone());
    assert!(answer.verify(&RustCrypto, &public, options).is_err());
    let mut m = [0u8; MAX_STATEMENT_LEN];
    if let Ok(n) = answer.statement(msg.location_path().filter_map(Result::ok).map(str::as_bytes), &mut m) {
        assert!(n <= MAX_STATEMENT_LEN);
    }
});
